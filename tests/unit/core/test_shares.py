"""Fair shares of the staleness window (security hole: a worker asking for 4096 groups held the
whole window, let it expire, took it again, and stalled the learner for a minute unpunished), and
late submissions refused by the deadline itself."""

import threading
import time

from shares_support import POLICY, Holder
from state_support import make_state, publish, submit_all, valid_submission

from echo2.core.shares import TRIAL_FLOOR_S, SharePolicy, deadline_s, group_seconds, lease_size, parked_for


def test_a_lease_never_exceeds_groups_per_lease_nor_a_workers_share():
    proven = Holder()
    assert lease_size(POLICY, requested=4096, held=0, window=64, others_live=False, holder=proven, others_proven=False) == 8
    assert lease_size(POLICY, requested=4, held=0, window=64, others_live=False, holder=proven, others_proven=False) == 4
    assert lease_size(POLICY, requested=8, held=0, window=8, others_live=True, holder=proven, others_proven=True) == 4  # half of 8
    # three leases in hand (submitting, generating, asked ahead), within the share
    assert lease_size(POLICY, requested=8, held=8, window=64, others_live=True, holder=proven, others_proven=True) == 8
    assert lease_size(POLICY, requested=8, held=20, window=64, others_live=True, holder=proven, others_proven=True) == 4
    assert lease_size(POLICY, requested=8, held=24, window=64, others_live=True, holder=proven, others_proven=True) == 0
    assert lease_size(POLICY, requested=8, held=14, window=32, others_live=True, holder=proven, others_proven=True) == 2  # share 16
    assert lease_size(POLICY, requested=8, held=32, window=64, others_live=False, holder=proven, others_proven=False) == 8  # alone


def test_a_worker_on_trial_or_slowed_holds_one_lease_at_a_time():
    assert lease_size(POLICY, requested=8, held=1, window=64, others_live=True, holder=Holder(proven=False), others_proven=True) == 0
    assert lease_size(POLICY, requested=8, held=1, window=64, others_live=True, holder=Holder(unfulfilled=1), others_proven=True) == 0


def test_a_worker_whose_leases_expire_is_slowed_then_parked_for_longer_each_time():
    assert lease_size(POLICY, requested=8, held=0, window=64, others_live=False, holder=Holder(unfulfilled=1), others_proven=False) == 1
    assert [parked_for(POLICY, n, lease_timeout_s=60) for n in range(5)] == [0, 0, 60, 240, 960]


def test_a_newcomer_gets_one_group_until_it_delivers_and_is_parked_at_its_first_miss():
    newcomer = Holder(proven=False)
    assert lease_size(POLICY, requested=8, held=0, window=64, others_live=True, holder=newcomer, others_proven=True) == 1
    assert lease_size(POLICY, requested=8, held=0, window=64, others_live=False, holder=newcomer, others_proven=False) == 8  # no one else
    assert [parked_for(POLICY, n, lease_timeout_s=60, proven=False) for n in range(4)] == [0, 60, 240, 960]


def test_a_device_sized_ask_is_capped_by_what_the_worker_has_delivered():
    """With ``groups_per_lease: device`` the worker's ask is its own word on its memory: while
    others are live it gets at most twice the groups it has delivered (alone, all it asks)."""
    device = SharePolicy(groups_per_lease=128, window_share=0.5, grows_with_delivery=True)
    def size(delivered, others_live=True):
        return lease_size(device, requested=128, held=0, window=128, others_live=others_live,
                          holder=Holder(groups_delivered=delivered), others_proven=others_live)
    assert [size(n) for n in (0, 1, 4, 16, 64)] == [1, 2, 8, 32, 64]  # 64: its share of the window
    assert size(0, others_live=False) == 128
    assert lease_size(POLICY, requested=8, held=0, window=64, others_live=True, holder=Holder(), others_proven=True) == 8  # not device-sized


def test_a_lent_lease_expires_within_a_few_group_times_of_the_slowest_measured_worker():
    """Slot-seconds bounded in time as well as in slots: a trial lease lasts 4 group-times of the
    slowest measured worker at work (10 s at least), twice that after each miss, never past the
    run's timeout; a proven worker's lease gets the timeout."""
    assert group_seconds(4, holder_rate=None, measured_rates=[8.0, 2.0]) == 2.0  # 4 rollouts at 2/s
    assert group_seconds(4, holder_rate=1.0, measured_rates=[8.0, 2.0]) == 4.0  # the holder is slower
    assert group_seconds(4, holder_rate=None, measured_rates=[]) is None
    newcomer = Holder(proven=False)
    assert deadline_s(60.0, lent=True, holder=newcomer, group_s=5.0) == 20.0
    assert deadline_s(60.0, lent=True, holder=newcomer, group_s=0.3) == TRIAL_FLOOR_S
    assert deadline_s(60.0, lent=True, holder=Holder(proven=False, unfulfilled=1), group_s=5.0) == 40.0
    assert deadline_s(60.0, lent=True, holder=Holder(proven=False, unfulfilled=3), group_s=5.0) == 60.0
    assert deadline_s(60.0, lent=True, holder=newcomer, group_s=None) == 60.0  # nothing measured yet
    assert deadline_s(60.0, lent=False, holder=Holder(), group_s=0.3) == 60.0


def test_the_coordinator_grants_a_newcomer_a_short_lease_beside_a_measured_worker():
    state = make_state(staleness=3, groups_per_step=4)  # leases time out after 60 s
    newcomer, other = state.members.register("newcomer"), state.members.register("other")
    other.proven, other.throughput = True, 4.0  # group_size 2: half a second a group
    trial = state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0)
    assert trial.deadline_s == TRIAL_FLOOR_S
    assert state.leases.get(trial.lease_id).deadline - time.monotonic() <= TRIAL_FLOOR_S
    assert state.work.lease(other, worker_version=0, max_groups=4096, wait_s=0).deadline_s == 60.0


def hoarder_and_honest(staleness=1, groups_per_step=4):
    """Two workers past their trial (each as if it had delivered a lease before)."""
    state = make_state(staleness=staleness, groups_per_step=groups_per_step)
    hoarder, honest = state.members.register("hoarder"), state.members.register("honest")
    hoarder.proven = honest.proven = True
    return state, hoarder, honest


def expire_all(state, worker):
    for lease in state.books.active_leases(worker.worker_id):
        lease.deadline = 0
    state.members.reap()


def test_a_new_name_gains_a_hoarder_nothing_one_group_then_parked_until_it_delivers():
    state = make_state(staleness=3, groups_per_step=4)  # a 16-slot window: room for a full lease of 8
    newcomer, other = state.members.register("newcomer"), state.members.register("other")
    other.proven = True  # it has delivered: it could do the newcomer's work
    assert len(state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0).prompts) == 1
    expire_all(state, newcomer)
    assert state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0).status == "parked"  # first miss
    newcomer.parked_until = 0.0
    submit_all(state, newcomer, state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0))
    assert not newcomer.proven  # accepted is not delivered: its group must be trained first
    train_one_step(state)
    assert newcomer.proven and len(state.work.lease(newcomer, 0, 4096, wait_s=0).prompts) == 8  # half the window
    state.members.deregister(other)
    state.members.deregister(newcomer)
    latecomer = state.members.register("latecomer")  # alone in the run: nobody else could do the work
    assert len(state.work.lease(latecomer, 0, 4096, wait_s=0).prompts) == 8


def test_a_proven_worker_that_takes_no_work_does_not_hold_newcomers_to_one_untrained_group():
    """A newcomer waits for its submitted group to be trained before its next lent group only while
    a proven worker is working (it could fill the batch meanwhile): holds a lease, or began its
    lease cycle within the lease timeout. One that delivered once and now only heartbeats is no
    cover: it left two honest newcomers one untrained group each, short of a batch of four, and a
    run starved at step 0."""
    state = make_state(staleness=3, groups_per_step=4)
    newcomer, idle = state.members.register("newcomer"), state.members.register("idle")
    idle.proven = True  # delivered once; holds nothing now
    submit_all(state, newcomer, state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0))
    assert not newcomer.proven and len(state.books.ledger) == 1  # accepted, buffered, untrained
    second = state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0)
    assert len(second.prompts) == 1
    submit_all(state, newcomer, second)
    idle.cycle.began_at = time.monotonic() - 59  # it submitted a lease 59 s ago (leases time out after 60)
    assert state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0).status == "wait"
    idle.cycle.began_at = time.monotonic() - 61
    assert state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0).status == "granted"


def test_a_newcomers_slot_is_lent_so_the_others_keep_the_whole_window_while_it_holds_it():
    state = make_state(staleness=1, groups_per_step=4)  # a window of 8 slots at version 0
    newcomer, honest = state.members.register("newcomer"), [state.members.register("a"), state.members.register("b")]
    for worker in honest:
        worker.proven = True
    assert len(state.work.lease(newcomer, worker_version=0, max_groups=4096, wait_s=0).prompts) == 1
    granted = [len(state.work.lease(worker, 0, 4, wait_s=0).prompts) for worker in honest]
    assert granted == [4, 4] and state.books.ledger.useful_slots == 8  # the newcomer's slot is not counted
    expire_all(state, newcomer)
    assert state.books.ledger.useful_slots == 8 and not state.books.ledger.lent


def test_a_hoarder_holds_at_most_its_share_and_the_others_keep_working():
    state, hoarder, honest = hoarder_and_honest()  # window (S + 1) B = 8 slots, groups_per_lease 8
    first = state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0)
    assert len(first.prompts) == 4  # half the window
    assert state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0).status == "wait"  # one at a time
    assert len(state.work.lease(honest, worker_version=0, max_groups=8, wait_s=0).prompts) == 4


def test_the_next_lease_asked_while_the_last_is_submitted_is_granted_as_soon_as_that_one_is_in():
    """A worker asks for its next lease while its results are still on the wire (one round trip per
    lease): the coordinator holds the request until they are in, then grants it: a worker holds no more than its share of the window."""
    state, worker, _ = hoarder_and_honest()
    held = state.work.lease(worker, worker_version=0, max_groups=4, wait_s=0)
    answers: list = []
    asking = threading.Thread(target=lambda: answers.append(state.work.lease(worker, 0, 4, wait_s=10)))
    asking.start()
    time.sleep(0.3)
    assert asking.is_alive() and not answers  # held back, not answered "wait" at once
    submitted = time.monotonic()
    submit_all(state, worker, held)
    asking.join(5)
    assert answers[0].status == "granted" and len(answers[0].prompts) == 4
    assert time.monotonic() - submitted < 1.0  # granted when the submission was in, not at the 10 s deadline


def test_expiring_leases_throttle_then_park_a_worker_and_a_submission_clears_it():
    state, hoarder, honest = hoarder_and_honest()

    state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0)
    expire_all(state, hoarder)
    assert hoarder.unfulfilled == 1
    assert len(state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0).prompts) == 1  # slowed
    expire_all(state, hoarder)
    assert hoarder.unfulfilled == 2 and state.work.lease(hoarder, worker_version=0, max_groups=1, wait_s=0).status == "parked"
    from echo2.coordinator.dashboard import _state

    assert _state(hoarder, oldest_usable=0, median=None) == "throttled"
    hoarder.parked_until = 0.0  # its parking is over
    lease = state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0)
    submit_all(state, hoarder, lease)
    assert hoarder.unfulfilled == 2  # forgiven once its group is trained, not when it is accepted
    train_one_step(state)
    assert hoarder.unfulfilled == 0 and len(state.work.lease(hoarder, 0, 4096, wait_s=0).prompts) == 4


def train_one_step(state) -> None:
    """The learner takes what is buffered for its next step and publishes the version it trained."""
    step = state.version
    state.take_batch(step, timeout_s=1, count=len(state.books.ledger))
    publish(state, step + 1)


def test_a_hoarder_that_returns_with_junk_too_old_to_train_earns_nothing():
    """It held its one-group lease until the learner had moved S + 2 versions on, then submitted:
    accepted, it had been forgiven and proven, its group dropped as stale before any audit, and
    its next lease a full one. Only a trained group delivers, and a group of a worker on trial
    dropped as stale is a miss: it is parked (from its first miss, being on trial), then lent one
    group again."""
    state = make_state(staleness=1, groups_per_step=1)
    hoarder, honest = state.members.register("hoarder"), state.members.register("honest")
    honest.proven = True
    held = state.work.lease(hoarder, worker_version=0, max_groups=4096, wait_s=0)
    for step in range(3):  # S + 2 versions on, on the honest worker's groups
        submit_all(state, honest, state.work.lease(honest, worker_version=step, max_groups=1, wait_s=0))
        train_one_step(state)
    assert state.work.submit(hoarder, valid_submission(held)).accepted == 1 and not hoarder.proven
    submit_all(state, honest, state.work.lease(honest, worker_version=3, max_groups=1, wait_s=0))
    state.take_batch(3, timeout_s=1, count=1)  # drops the hoarder's v0 group as stale, trains the honest one
    publish(state, 4)
    assert state.books.ledger.dropped_stale == 1 and not hoarder.proven and hoarder.unfulfilled == 1
    assert state.work.lease(hoarder, worker_version=4, max_groups=4096, wait_s=0).status == "parked"
    assert hoarder.parked_until - time.monotonic() > 50  # the run's lease timeout, 60 s
    hoarder.parked_until = 0.0
    again = state.work.lease(hoarder, worker_version=4, max_groups=4096, wait_s=0)
    assert len(again.prompts) == 1 and state.books.ledger.lent  # still on trial: one lent group
