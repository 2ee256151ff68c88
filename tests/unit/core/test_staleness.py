"""The staleness / pacing rule, alone and as the coordinator applies it."""

import pytest
import torch
from state_support import make_state, publish, submit_all

from echo2.broadcast.publisher import Publisher
from echo2.config import BroadcastConfig
from echo2.core import staleness as rule


def test_is_fresh():
    assert rule.is_fresh(step=5, version=5, staleness=0)
    assert not rule.is_fresh(step=5, version=4, staleness=0)
    assert rule.is_fresh(step=5, version=3, staleness=2)
    assert not rule.is_fresh(step=5, version=2, staleness=2)
    assert not rule.is_fresh(step=5, version=6, staleness=2)  # from the future: impossible, refused


def test_lease_window_matches_areal_bound():
    # (S + v + 1) * B
    assert rule.lease_window(version=0, staleness=0, groups_per_step=4) == 4
    assert rule.lease_window(version=3, staleness=2, groups_per_step=4) == 24


def test_worker_can_take():
    # slot 9 with B=4 is meant for step 2
    assert rule.slot_step(9, 4) == 2
    assert rule.worker_can_take(9, worker_version=1, staleness=1, groups_per_step=4)
    assert not rule.worker_can_take(9, worker_version=0, staleness=1, groups_per_step=4)


def test_pacing_window_limits_leases_and_reopens_after_a_step():
    state = make_state(staleness=1, groups_per_step=2)
    worker = state.members.register("w")
    first = state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0)
    assert first.status == "granted" and len(first.prompts) == 4  # (S + v + 1) * B = 4
    assert state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0).status == "wait"
    submit_all(state, worker, first)
    batch = state.take_batch(step=0, timeout_s=1)
    assert len(batch) == 2
    publish(state, 1)
    # window is now 6: two more slots, meant for step 2; a v0 worker is too old for them (2 - 0 > S)
    assert state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0).status == "refresh"
    second = state.work.lease(worker, worker_version=1, max_groups=8, wait_s=0)
    assert second.status == "granted" and len(second.prompts) == 2


def test_sync_admits_only_the_current_version():
    state = make_state(staleness=0, groups_per_step=2)
    worker = state.members.register("w")
    lease = state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0)
    assert len(lease.prompts) == 2
    submit_all(state, worker, lease)
    state.take_batch(step=0, timeout_s=1)
    publish(state, 1)
    assert state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0).status == "refresh"


def test_stale_groups_are_dropped_counted_and_requeued():
    state = make_state(staleness=1, groups_per_step=2)
    worker = state.members.register("w")
    lease = state.work.lease(worker, worker_version=0, max_groups=4, wait_s=0)
    submit_all(state, worker, lease)
    prompts = {p.prompt for p in lease.prompts}
    # pretend the learner jumped to step 2: every v0 group is now older than S = 1
    with pytest.raises(TimeoutError, match="waited"):
        state.take_batch(step=2, timeout_s=0.1)
    assert state.books.ledger.dropped_stale == 4
    assert state.books.ledger.useful_slots == 0  # dropped slots no longer count against the window
    publish(state, 2)
    again = state.work.lease(worker, worker_version=2, max_groups=4, wait_s=0)
    assert {p.prompt for p in again.prompts} == prompts  # no prompt lost


def test_versions_a_stale_worker_may_still_use_stay_downloadable():
    staleness = 2
    state = make_state(staleness=staleness)
    publisher = Publisher(BroadcastConfig(chunk_mib=0.001), keep_versions=staleness + 2, token=None)
    model = torch.nn.Linear(4, 4)
    for version in range(0, 6):
        publish(state, version)
        publisher.publish(version, model)
    # at v5 with S=2, v2..v5 may still generate useful groups (a slow link may deliver v2 late)
    assert sorted(state.versions.published) == [2, 3, 4, 5]
    assert publisher.store.versions() == [2, 3, 4, 5]
    assert publisher.store.complete(2)


def test_the_versions_in_use_are_the_fresh_window_and_the_one_published_meanwhile():
    from echo2.core.staleness import is_fresh, versions_in_use, versions_trainable

    for staleness in range(5):
        step = 10
        trainable = [v for v in range(step + 1) if is_fresh(step, v, staleness)]
        # the audit keeps every version a group trained now may claim (a shorter cache let a
        # worker claim an older version and never be checked)
        assert versions_trainable(staleness) == len(trainable)
        # while step trains, the learner publishes step + 1: a worker may hold any of these
        assert versions_in_use(staleness) == len(trainable) + 1
