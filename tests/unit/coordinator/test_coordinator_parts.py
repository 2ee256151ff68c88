"""The coordinator's parts on their own: registry and credentials, lease checks, scoring, the reliability books."""

import math
import threading
import time
from collections import Counter

import pytest
from state_support import SCORE, answering, make_state, publish, submit_all, valid_submission

from echo2.coordinator.leases import LeaseBook, check_submission
from echo2.coordinator.records import Lease, Limits, Rejected
from echo2.coordinator.registry import WorkerRegistry
from echo2.protocol import GroupResult, SubmitRequest
from echo2.tasks import Example

LIMITS = Limits(group_size=2, max_new_tokens=4, vocab_size=20)


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
    assert "declared dead" in dead.value.reason
    a.alive, a.left = False, True  # deregistered itself: told so, not that it was declared dead
    with pytest.raises(Rejected) as left:
        registry.authenticate(a.session_token)
    assert left.value.status == 410 and left.value.code == "left" and "deregistered" in left.value.reason


def test_registry_finds_silent_workers_and_lists_reachable_relays():
    registry = WorkerRegistry("t")
    quiet = registry.add("quiet", "http://10.0.0.1:1", None, 0.0, "")
    chatty = registry.add("chatty", None, None, 0.0, "")
    quiet.last_seen = time.monotonic() - 100
    assert registry.silent(30) == [quiet] and chatty not in registry.silent(30)
    assert registry.relay_urls() == {quiet.worker_id: "http://10.0.0.1:1"}


class _Prompt:
    def __init__(self, slot):
        self.slot, self.prompt = slot, "p"


class _Reply:
    def __init__(self, lease):
        self.lease_id, self.version, self.prompts = lease.lease_id, lease.version, [_Prompt(s) for s in lease.slots]


@pytest.mark.parametrize(("change", "code"), [
    (lambda request, lease: request.model_copy(update={"version": 3}), "bad_version"),
    (lambda request, lease: request.model_copy(update={"groups": request.groups[:1] * 2}), "bad_slots"),
    (lambda request, lease: request.model_copy(update={"groups": [request.groups[0].model_copy(update={"slot": 7})]}),
     "bad_slots"),
    (lambda request, lease: request.model_copy(update={"lease_id": "other"}), "unknown_lease"),
])
def test_a_submission_must_answer_its_own_lease_open_slots_each_once(change, code):
    book = LeaseBook(Counter())
    lease = Lease("l0", "w0", 1, {0: Example("p", "a"), 1: Example("q", "b")}, time.monotonic(), time.monotonic() + 60)
    book.add(lease)
    request = valid_submission(_Reply(lease))
    assert check_submission(lease, "w0", request, LIMITS, 1) is lease
    with pytest.raises(Rejected) as refused:
        bad = change(request, lease)
        check_submission(book.get(bad.lease_id), "w0", bad, LIMITS, 1)
    assert refused.value.code == code
    with pytest.raises(Rejected) as foreign:
        check_submission(lease, "w1", request, LIMITS, 1)
    assert foreign.value.code == "unknown_lease"


def test_an_expired_or_overdue_lease_is_refused():
    lease = Lease("l0", "w0", 0, {0: Example("p", "a")}, time.monotonic(), time.monotonic() - 1)
    with pytest.raises(Rejected) as overdue:
        check_submission(lease, "w0", valid_submission(_Reply(lease)), LIMITS, 1)
    assert overdue.value.code == "expired_lease"
    lease.state = "expired"
    with pytest.raises(Rejected) as refused:
        check_submission(lease, "w0", valid_submission(_Reply(lease)), LIMITS, 1)
    assert refused.value.code == "expired_lease"


def test_the_reliability_report_accounts_for_every_prompt_through_expiry_staleness_and_quarantine():
    state = make_state(staleness=0, heartbeat_timeout_s=60)
    honest, liar = state.members.register("honest"), state.members.register("liar")
    submit_all(state, honest, state.work.lease(honest, 0, 1, wait_s=0))
    submit_all(state, liar, state.work.lease(liar, 0, 1, wait_s=0))
    state.take_batch(0, timeout_s=1)  # trained
    publish(state, 1)
    lost = state.work.lease(honest, 1, 1, wait_s=0)
    state.leases.get(lost.lease_id).deadline = 0
    state.members.reap()  # expired: re-queued
    submit_all(state, liar, state.work.lease(liar, 1, 1, wait_s=0))
    state.quarantine(state.registry.workers[liar.worker_id].worker_id, "test")  # buffered group discarded
    report = state.reliability()
    assert report["prompts_unaccounted"] == 0 and report["prompts_drawn"] == 3
    assert report["leases_expired"] == 1 and report["groups_discarded_quarantined"] == 1
    assert report["groups_trained"] == 2 and report["prompts_requeued"] == 2


def _answers(lease, correct):
    """A submission for ``lease`` whose completions state the right answer where ``correct`` says."""
    return SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.1,
                         groups=[GroupResult(slot=p.slot, completions=answering(p.prompt, correct))
                                 for p in lease.prompts])


def test_the_coordinator_scores_every_group_itself():
    state = make_state(staleness=1)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 2, wait_s=0)
    assert state.work.submit(worker, _answers(lease, [True, False])).accepted == 2
    assert [g.rewards for g in state.take_batch(0, timeout_s=1)] == [[1.0, 0.0], [1.0, 0.0]]
    assert state.stats(0.0, 1.0).reward_seconds > 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_verifier_giving_a_non_finite_reward_refuses_the_submission_and_trains_nothing(bad):
    """A task's verifier that returns NaN or infinity (a bug, or odd tokens) must not put a
    non-finite reward into an advantage: the submission is refused as unscorable, nothing enters
    the buffer, and the lease stays open for an honest retry until it expires."""
    state = make_state(staleness=1, score=lambda example, completions, answered: [bad] + [1.0] * (len(completions) - 1))
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    with pytest.raises(Rejected, match="not one finite reward per completion") as refused:
        state.work.submit(worker, _answers(lease, [True, True]))
    assert refused.value.status == 422 and refused.value.code == "unscorable"
    assert state.reliability()["groups_accepted"] == 0
    with pytest.raises(TimeoutError):  # nothing was buffered
        state.take_batch(0, timeout_s=0.05, count=1)


class GatedScore:
    """Scores like :data:`conftest.SCORE`, but only once released (a slow verifier)."""

    def __init__(self) -> None:
        self.entered, self.release, self.calls = threading.Event(), threading.Event(), 0

    def __call__(self, example, completions, answered):
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10)
        return SCORE(example, completions, answered)


def _submit_in_background(state, worker, request):
    outcome = {}

    def run():
        try:
            outcome["reply"] = state.work.submit(worker, request)
        except Rejected as refusal:
            outcome["refusal"] = refusal

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_scoring_runs_outside_the_lock_and_a_copy_sent_meanwhile_is_a_duplicate():
    score = GatedScore()
    state = make_state(staleness=1, score=score)
    worker, other = state.members.register("w"), state.members.register("other")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    thread, outcome = _submit_in_background(state, worker, _answers(lease, [True, True]))
    assert score.entered.wait(10)
    # the lock is free while the first copy is scored: others lease, and a second copy is a duplicate
    assert state.work.lease(other, 0, 1, wait_s=0).status == "granted"
    assert state.work.submit(worker, _answers(lease, [False, False])).duplicate
    score.release.set()
    thread.join(10)
    assert outcome["reply"].accepted == 1 and score.calls == 1
    assert [g.rewards for g in state.books.ledger.take(0, 1)] == [[1.0, 1.0]]  # the first copy, scored once
    assert state.books.counters.duplicate_submissions == 1


def test_a_worker_quarantined_while_its_submission_is_scored_is_refused():
    score = GatedScore()
    state = make_state(staleness=1, score=score)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 2, wait_s=0)
    thread, outcome = _submit_in_background(state, worker, _answers(lease, [True, False]))
    assert score.entered.wait(10)
    state.quarantine(worker.worker_id, "failed an audit")  # expires its leases, the one being scored too
    score.release.set()
    thread.join(10)
    assert outcome["refusal"].status == 403 and len(state.books.ledger) == 0
    report = state.reliability()
    assert report["prompts_unaccounted"] == 0 and report["prompts_requeued"] == 2
    assert report["leases_completed"] == 0 and report["groups_rejected"] == {"quarantined": 1}


def test_a_verifier_that_fails_refuses_the_submission_and_leaves_the_lease_open():
    def broken(example, completions, answered):
        raise ZeroDivisionError("verifier bug")

    state = make_state(staleness=1, score=broken)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    with pytest.raises(Rejected) as refused:
        submit_all(state, worker, lease)
    assert refused.value.code == "unscorable" and len(state.books.ledger) == 0
    assert state.leases.get(lease.lease_id).state == "active" and not state.leases.get(lease.lease_id).scoring
    assert state.reliability()["groups_rejected"] == {"unscorable": 1}


def test_a_lease_answered_group_by_group_is_done_with_its_last_group_and_a_part_sent_twice_is_kept_once():
    """A streaming worker submits each group as its rows finish: every part enters the buffer at once,
    a retried part is a duplicate, an answered slot cannot be answered again in another part, and the
    lease is done (its worker's cycle timed) only when its last slot is answered."""
    state = make_state(staleness=1, groups_per_step=3)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 3, wait_s=0)
    first, second, third = (_answers(lease, [True, False]).model_copy(update={"groups": [group]})
                            for group in _answers(lease, [True, False]).groups)
    assert state.work.submit(worker, first).accepted == 1
    assert len(state.books.ledger) == 1 and state.leases.get(lease.lease_id).state == "active"
    assert state.work.submit(worker, first).duplicate  # its answer was lost and the client sent it again
    with pytest.raises(Rejected) as again:  # the answered slot within a new part
        state.work.submit(worker, second.model_copy(update={"groups": [*second.groups, *first.groups]}))
    assert again.value.code == "bad_slots" and len(state.books.ledger) == 1
    state.work.submit(worker, second)
    assert state.books.counters.leases_completed == 0 and worker.throughput is None
    state.work.submit(worker, third)
    assert state.leases.get(lease.lease_id).state == "done" and len(state.books.ledger) == 3
    counters = state.books.counters
    assert (counters.leases_completed, counters.groups_accepted, counters.duplicate_submissions) == (1, 3, 1)
    assert worker.throughput is not None and worker.samples == 6


def test_a_lease_expiring_after_some_groups_hands_back_only_the_unanswered_prompts():
    state = make_state(staleness=1, groups_per_step=3)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 3, wait_s=0)
    answered = _answers(lease, [True, False])
    state.work.submit(worker, answered.model_copy(update={"groups": answered.groups[:1]}))
    state.books.expire(state.leases.get(lease.lease_id), time.monotonic(), missed_deadline=True)
    report = state.reliability()
    assert report["prompts_requeued"] == 2 and report["prompts_unaccounted"] == 0 and len(state.books.ledger) == 1
    again = state.work.lease(state.members.register("v"), 0, 3, wait_s=0)
    assert [p.prompt for p in again.prompts][:2] == [p.prompt for p in lease.prompts][1:]  # first in line


@pytest.mark.parametrize(("switches", "status"), [
    ([{"at": 1, "version": 10**30}], 422),  # past every published version
    ([{"at": 1, "version": 0}], 422),  # not after the lease's version
    ([{"at": 99, "version": 1}], None),  # past the completion's end: refused by the message itself
    ([{"at": 1, "version": 1}, {"at": 1, "version": 1}], None),  # not increasing
])
def test_a_switch_a_worker_could_not_have_made_is_refused_and_changes_nothing(switches, status):
    from pydantic import ValidationError

    state = make_state(staleness=1)
    publish(state, 1)
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    body = _answers(lease, [True, False]).model_dump()
    body["groups"][0]["completions"][0]["switches"] = switches
    try:
        request = SubmitRequest.model_validate(body)
    except ValidationError:
        assert status is None
        return
    with pytest.raises(Rejected) as refused:
        state.work.submit(worker, request)
    assert refused.value.status == status and refused.value.code == "bad_version" and len(state.books.ledger) == 0
