"""The lease-answer core (:mod:`echo2.core.leasing`): driven alone without threads or sockets, and
shown to be the one rule both the live coordinator and the simulator obey."""

import pytest
from shares_support import POLICY, Holder
from simulation_support import scenario
from state_support import make_state, submit_all

from echo2.core import leasing
from echo2.core.leasing import answer_lease
from echo2.core.pacing import PacingLedger
from echo2.simulation.engine import simulate


def ask(ledger, holder=None, *, version=0, held=0, active=True, others=False, now=0.0, finished=False, group_s=None,
        requests="none"):
    return answer_lease(ledger, POLICY, holder or Holder(), worker_version=version, requested=64, held=held,
                        active=active, others_live=others, now=now, lease_timeout_s=60.0, group_s=group_s,
                        others_proven=others, finished=finished, requests=requests)


def test_a_finished_run_stops_everyone_and_a_left_out_or_parked_worker_is_parked_until_its_time():
    ledger = PacingLedger(staleness=1, groups_per_step=4)
    assert ask(ledger, finished=True, active=False).status == "stop"
    assert ask(ledger, active=False).status == "parked"
    parked = Holder(parked_until=10.0)
    assert ask(ledger, parked, now=9.9).status == "parked" and not ask(ledger, parked, now=9.9).final
    assert ask(ledger, parked, now=10.0).status == "granted"


def test_the_window_then_the_weights_then_the_share_decide():
    ledger = PacingLedger(staleness=1, groups_per_step=4)  # a window of (S + 1) B = 8 slots at version 0
    assert ask(ledger) == leasing.LeaseAnswer("granted", 8, deadline_s=60.0)  # alone: a whole lease
    assert ask(ledger, others=True).size == 4  # others live: half the window
    assert ask(ledger, Holder(proven=False), others=True).size == 1  # on trial
    assert ask(ledger, held=4, others=True).status == "wait"  # its own lease is still coming in
    ledger.grant(0, 8, lambda: None)
    assert ask(ledger).status == "wait" and not ask(ledger).final  # window full
    ledger.version = 3  # version 0's weights are now too old for the next slot
    ledger.useful_slots = 8
    assert ask(ledger, version=0) == leasing.LeaseAnswer("refresh") and ask(ledger, version=0).final


@pytest.mark.parametrize("prompts", [True, False], ids=["task-run", "service"])
@pytest.mark.parametrize("case, expected", [
    # (holder, requests waiting, others proven, active, finished) -> (status, size, kind)
    (dict(requests="servable"), ("granted", 64, "sample")),  # as many as it asks for, ahead of the task's prompts
    (dict(requests="newer"), ("refresh", 0, "prompt")),  # those waiting need newer weights than it holds
    (dict(requests="servable", holder=Holder(proven=False), others=True), ("granted", 1, "sample")),  # on probation
    (dict(requests="servable", holder=Holder(proven=False)), ("granted", 64, "sample")),  # alone: no probation
    (dict(requests="servable", active=False), ("parked", 0, "prompt")),  # left out by the activation
    (dict(requests="servable", holder=Holder(parked_until=5.0)), ("parked", 0, "prompt")),  # parked for misses
    (dict(requests="servable", finished=True), ("stop", 0, "prompt")),
])
def test_sampling_requests_are_answered_by_the_same_rule_ahead_of_any_prompt(prompts, case, expected):
    ledger = PacingLedger(staleness=1, groups_per_step=4) if prompts else None
    answer = ask(ledger, **case)
    assert (answer.status, answer.size, answer.kind) == expected
    if answer.status == "granted":
        assert answer.deadline_s > 0


def test_with_no_prompts_and_no_requests_a_worker_waits_and_a_finished_run_stops_it():
    assert ask(None) == leasing.LeaseAnswer("wait") and not ask(None).final
    assert ask(None, finished=True).status == "stop" and ask(None, active=False).status == "parked"


def _live_lease_size() -> int:
    state = make_state(staleness=3, groups_per_step=4)
    worker = state.members.register("w")
    lease = state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0)
    submit_all(state, worker, lease)
    return len(lease.prompts)


def _simulated_groups_per_lease() -> float:
    books = simulate(scenario()).reliability
    return books["groups_trained"] / books["leases_issued"]


def test_a_wrong_rule_in_the_core_breaks_the_live_coordinator_and_the_simulator_alike(monkeypatch):
    assert _live_lease_size() == 8 and _simulated_groups_per_lease() > 4
    monkeypatch.setattr(leasing, "lease_size", lambda *args, **kwargs: 1)  # a wrong share rule, in the core only
    assert _live_lease_size() == 1
    assert _simulated_groups_per_lease() == pytest.approx(1.0, abs=0.05)
