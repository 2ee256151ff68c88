"""The coordinator's parts on their own: registry and credentials, lease checks, the reliability books."""

import time

import pytest
from conftest import make_state, publish, submit_all, valid_submission

from echo2.coordinator.leases import LeaseBook, check_submission
from echo2.coordinator.records import Limits, Rejected
from echo2.coordinator.registry import WorkerRegistry
from echo2.tasks import Example

LIMITS = Limits(group_size=2, max_new_tokens=4, vocab_size=20, reward_range=(0.0, 1.0))


def test_registry_issues_distinct_sessions_and_refuses_unknown_or_dead_ones():
    registry = WorkerRegistry("run-token")
    a, b = (registry.add(name, None, None, 0.0, "") for name in ("a", "b"))
    assert a.session_token != b.session_token and a.worker_id != b.worker_id
    assert registry.authenticate(a.session_token) is a
    assert registry.admits("run-token") and not registry.admits("run-toke") and not registry.admits(None)
    with pytest.raises(Rejected) as unknown:
        registry.authenticate("forged")
    assert unknown.value.status == 401
    b.alive = False
    with pytest.raises(Rejected) as dead:
        registry.authenticate(b.session_token)
    assert dead.value.status == 410 and registry.live() == [a]


def test_registry_finds_silent_workers_and_lists_reachable_relays():
    registry = WorkerRegistry("t")
    quiet = registry.add("quiet", "http://10.0.0.1:1", None, 0.0, "")
    chatty = registry.add("chatty", None, None, 0.0, "")
    quiet.last_seen = time.monotonic() - 100
    assert registry.silent(30) == [quiet] and chatty not in registry.silent(30)
    assert registry.relay_urls() == {quiet.worker_id: "http://10.0.0.1:1"}


class _Prompt:
    def __init__(self, slot):
        self.slot, self.prompt, self.answer = slot, "p", "a"


class _Reply:
    def __init__(self, lease):
        self.lease_id, self.version, self.prompts = lease.lease_id, lease.version, [_Prompt(s) for s in lease.examples]


@pytest.mark.parametrize(("change", "code"), [
    (lambda request, lease: request.model_copy(update={"version": 3}), "bad_version"),
    (lambda request, lease: request.model_copy(update={"groups": request.groups[:1]}), "bad_slots"),
    (lambda request, lease: request.model_copy(update={"lease_id": "other"}), "unknown_lease"),
])
def test_a_submission_must_answer_its_own_lease_slot_for_slot(change, code):
    book = LeaseBook(timeout_s=60)
    lease = book.issue("w0", 1, {0: Example("p", "a"), 1: Example("q", "b")})
    request = valid_submission(_Reply(lease))
    assert check_submission(lease, "w0", request, LIMITS) is lease
    with pytest.raises(Rejected) as refused:
        bad = change(request, lease)
        check_submission(book.get(bad.lease_id), "w0", bad, LIMITS)
    assert refused.value.code == code
    with pytest.raises(Rejected) as foreign:
        check_submission(lease, "w1", request, LIMITS)
    assert foreign.value.code == "unknown_lease"


def test_overdue_leases_are_found_and_expired_ones_refused():
    book = LeaseBook(timeout_s=60)
    lease = book.issue("w0", 0, {0: Example("p", "a")})
    assert book.overdue() == [] and book.active("w0") == [lease] and book.active("w1") == []
    lease.deadline = time.monotonic() - 1
    assert book.overdue() == [lease]
    lease.state = "expired"
    with pytest.raises(Rejected) as refused:
        check_submission(lease, "w0", valid_submission(_Reply(lease)), LIMITS)
    assert refused.value.code == "expired_lease"


def test_the_reliability_report_accounts_for_every_prompt_through_expiry_staleness_and_quarantine():
    state = make_state(staleness=0, heartbeat_timeout_s=60)
    honest, liar = state.register("honest"), state.register("liar")
    submit_all(state, honest, state.lease(honest, 0, 1, wait_s=0))
    submit_all(state, liar, state.lease(liar, 0, 1, wait_s=0))
    state.take_batch(0, timeout_s=1)  # trained
    publish(state, 1)
    lost = state.lease(honest, 1, 1, wait_s=0)
    state.leases.get(lost.lease_id).deadline = 0
    state.reap()  # expired: re-queued
    submit_all(state, liar, state.lease(liar, 1, 1, wait_s=0))
    state.quarantine(state.registry.workers[liar.worker_id].worker_id, "test")  # buffered group discarded
    report = state.reliability()
    assert report["prompts_unaccounted"] == 0 and report["prompts_drawn"] == 3
    assert report["leases_expired"] == 1 and report["groups_discarded_quarantined"] == 1
    assert report["groups_trained"] == 2 and report["prompts_requeued"] == 2
