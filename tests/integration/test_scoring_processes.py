"""The coordinator's verdicts from processes of their own, each call bounded in time
(:mod:`echo2.coordinator.scoring_processes`): a stalling verifier costs one ``scoring_timeout_s``
and refuses its submission, and the coordinator goes on scoring."""

import os
import time

import pytest
from paths import DATA
from stalling_task import FAILS, STALLS
from state_support import EOS, answering, decode, encode, make_state, publish

from echo2.coordinator.records import Rejected
from echo2.coordinator.scoring import task_scorer
from echo2.coordinator.scoring_processes import ScoringError, ScoringOverrun, ScoringProcesses
from echo2.protocol import Completion, GroupResult, SubmitRequest
from echo2.tasks import Example, load_task

TASK = "stalling_task:StallingArithmetic"
GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
EXAMPLE = Example(prompt="2+2=", answer="4")


@pytest.fixture()
def processes():
    pool = ScoringProcesses(TASK, {}, processes=2, timeout_s=0.5)
    yield pool
    pool.close()


def pids(pool: ScoringProcesses) -> set[int]:
    return {p.process.pid for p in pool._live}


def test_verdicts_are_the_tasks_and_a_stall_is_cut_off_and_its_process_replaced(processes):
    assert processes.episode_rewards(EXAMPLE, [["4"], ["5"], ["40"]]) == [1.0, 0.0, 0.0]
    before = pids(processes)
    started = time.monotonic()
    with pytest.raises(ScoringOverrun, match="scoring_timeout_s = 0.5 s"):
        processes.episode_rewards(EXAMPLE, [["4"], [STALLS]])
    assert time.monotonic() - started < 10  # the bound, plus a fresh process's start
    after = pids(processes)
    assert len(after) == 2 and len(after & before) == 1 and processes.overruns == 1
    for _ in range(4):  # both processes, the fresh one included, answer again
        assert processes.episode_rewards(EXAMPLE, [["4"]]) == [1.0]


def test_a_failing_verifier_raises_its_error_and_its_process_lives_on(processes):
    before = pids(processes)
    with pytest.raises(ScoringError, match=f"ArithmeticError: cannot verify '{FAILS}'"):
        processes.episode_rewards(EXAMPLE, [[FAILS]])
    assert pids(processes) == before and processes.overruns == 0
    assert processes.episode_rewards(EXAMPLE, [["4"]]) == [1.0]


def test_a_stalling_environment_is_cut_off_like_a_verifier(processes):
    assert processes.respond(EXAMPLE, ["4"]) == "again"
    with pytest.raises(ScoringOverrun):
        processes.respond(EXAMPLE, [STALLS])
    assert processes.respond(EXAMPLE, ["4"]) == "again"


def test_a_process_that_dies_is_replaced(processes):
    for pid in pids(processes):
        os.kill(pid, 9)
    time.sleep(0.2)
    with pytest.raises(ScoringError, match="died"):
        processes.episode_rewards(EXAMPLE, [["4"]])
    with pytest.raises(ScoringError, match="died"):  # the other dead one, met next
        processes.episode_rewards(EXAMPLE, [["4"]])
    assert processes.episode_rewards(EXAMPLE, [["4"]]) == [1.0] and len(pids(processes)) == 2


def test_a_pool_that_cannot_start_processes_refuses_at_once_then_heals(tmp_path):
    """Processes killed while none can start again: the pool is left empty and every call is
    refused at once, with the reason, not after ``wait_s``; once a process can start, the next
    call due for a retry restores the pool."""
    flag = tmp_path / "no-more-processes"
    pool = ScoringProcesses(TASK, {"refuse_if": str(flag)}, processes=2, timeout_s=0.5, restore_every_s=1.0)
    try:
        flag.touch()
        for pid in pids(pool):
            os.kill(pid, 9)
        time.sleep(0.2)
        for _ in range(2):  # each dead process is met once, and cannot be replaced
            with pytest.raises(ScoringError, match="died"):
                pool.episode_rewards(EXAMPLE, [["4"]])
        assert not pids(pool)
        started = time.monotonic()
        with pytest.raises(ScoringError, match=r"no scoring process is left \(.*MemoryError: cannot build"):
            pool.episode_rewards(EXAMPLE, [["4"]])
        assert time.monotonic() - started < pool.wait_s / 2
        flag.unlink()
        time.sleep(1.0)  # the retry is due
        assert pool.episode_rewards(EXAMPLE, [["4"]]) == [1.0] and len(pids(pool)) == 1
        time.sleep(1.0)
        assert pool.episode_rewards(EXAMPLE, [["4"]]) == [1.0] and len(pids(pool)) == 2  # back to its size
    finally:
        pool.close()


def test_closing_stops_every_process():
    pool = ScoringProcesses(TASK, {}, processes=2, timeout_s=0.5)
    live = [p.process for p in pool._live]
    pool.close()
    assert all(not process.is_alive() for process in live)
    with pytest.raises(ScoringError, match="closed"):
        pool.episode_rewards(EXAMPLE, [["4"]])


def test_a_task_the_processes_cannot_build_fails_at_once_with_the_reason():
    with pytest.raises(ScoringError, match="could not build task 'stalling_task:NoSuchTask'"):
        ScoringProcesses("stalling_task:NoSuchTask", {}, processes=1, timeout_s=0.5)


def test_a_submission_whose_verdict_stalls_is_refused_and_the_next_one_is_scored(processes):
    """What a worker gains by submitting an answer the verifier chokes on: one refusal, after
    ``scoring_timeout_s``; the lease stays open for its prompts, nothing is trained on, and the
    coordinator scores the next submission as before."""
    state = make_state(staleness=1, score=task_scorer(processes, decode, encode))
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    (prompt,) = lease.prompts
    stalled = [Completion(token_ids=encode(STALLS) + [EOS], logprobs=[-0.1] * 3), *answering(prompt.prompt, [True])]
    started = time.monotonic()
    with pytest.raises(Rejected, match="ran past coordinator.scoring_timeout_s") as refused:
        state.work.submit(worker, SubmitRequest(lease_id=lease.lease_id, version=0, generate_seconds=0.1,
                                           groups=[GroupResult(slot=prompt.slot, completions=stalled)]))
    assert time.monotonic() - started < 10
    assert refused.value.code == "scoring_overrun" and len(state.books.ledger) == 0
    assert state.reliability()["groups_rejected"] == {"scoring_overrun": 1}  # told apart from a failing verifier
    assert state.leases.get(lease.lease_id).state == "active"
    publish(state, 1)
    honest = state.work.lease(worker, 1, 1, wait_s=0)
    (prompt,) = honest.prompts
    state.work.submit(worker, SubmitRequest(lease_id=honest.lease_id, version=1, generate_seconds=0.1,
                                       groups=[GroupResult(slot=prompt.slot,
                                                           completions=answering(prompt.prompt, [True, False]))]))
    assert [g.rewards for g in state.take_batch(1, timeout_s=1, count=1)] == [[1.0, 0.0]]


def test_a_tower_of_powers_that_math_verify_chokes_on_costs_one_bound():
    """The real verifier, not a stand-in: math-verify reads ``\\boxed{9^{9^{9^{9}}}}`` and sympy
    sets about that number. In a handler thread (``scoring_processes=0``) nothing stops it; in a
    scoring process math-verify's own 5 s timeout works (a main thread), and the call's bound
    cuts it off sooner. The reference answer of the sample's first problem still scores 1."""
    tower = "\\boxed{9^{9^{9^{9}}}}"
    pool = ScoringProcesses("gsm8k", {"source": str(GSM8K_SAMPLE)}, processes=1, timeout_s=2.0)
    try:
        example = load_task("gsm8k", {"source": str(GSM8K_SAMPLE)}).eval_examples(1)[0]
        right = f"The answer is \\boxed{{{example.answer}}}."
        assert pool.episode_rewards(example, [[right]]) == [1.0]
        started = time.monotonic()
        with pytest.raises(ScoringOverrun):
            pool.episode_rewards(example, [[right], [tower]])
        assert time.monotonic() - started < 2.0 + 5.0 and pool.overruns == 1
        assert pool.episode_rewards(example, [[right]]) == [1.0]  # a fresh process answers
    finally:
        pool.close()


def test_a_worker_whose_submissions_overrun_is_slowed_then_parked_like_a_hoarder(processes):
    """A refused submission leaves its lease to expire unfulfilled, which counts as a miss
    (:mod:`echo2.core.shares`): a proven worker sending only completions the verifier chokes on
    gets one group a lease after its first, and is parked after its second — each overrun costs
    the coordinator one bound, and the worker ever longer waits."""
    state = make_state(staleness=1, score=task_scorer(processes, decode, encode))
    worker, other = state.members.register("w"), state.members.register("other")  # another live worker: shares apply
    other.proven = True  # it has delivered: probation applies to the newcomer
    record = state.registry.workers[worker.worker_id]

    def submit_stalling() -> int:
        """A lease answered with completions that stall the verifier, then let expire: its size."""
        lease = state.work.lease(worker, 0, 4, wait_s=0)
        groups = [GroupResult(slot=p.slot, completions=[Completion(token_ids=encode(STALLS) + [EOS],
                                                                   logprobs=[-0.1] * 3)] * 2) for p in lease.prompts]
        with pytest.raises(Rejected, match="ran past"):
            state.work.submit(worker, SubmitRequest(lease_id=lease.lease_id, version=0, generate_seconds=0.1,
                                               groups=groups))
        state.leases.get(lease.lease_id).deadline = 0
        state.members.reap()  # its lease expires unfulfilled
        assert state.leases.get(lease.lease_id).state == "expired"
        return len(lease.prompts)

    first = state.work.lease(worker, 0, 1, wait_s=0)  # on trial: one group, delivered honestly
    (prompt,) = first.prompts
    state.work.submit(worker, SubmitRequest(lease_id=first.lease_id, version=0, generate_seconds=0.1,
                                       groups=[GroupResult(slot=prompt.slot,
                                                           completions=answering(prompt.prompt, [True, False]))]))
    assert not record.proven  # accepted; it delivers once the group is trained
    state.take_batch(0, timeout_s=1, count=1)
    publish(state, 1)
    assert record.proven
    first_size, second_size = submit_stalling(), submit_stalling()
    assert first_size > 1 and second_size == 1  # proven (its share of the window), then slowed to one group
    assert record.unfulfilled == 2 and record.parked_until > time.monotonic() + 30
    assert state.work.lease(worker, 0, 4, wait_s=0).status == "parked"
    assert state.reliability()["groups_rejected"] == {"scoring_overrun": 2}
