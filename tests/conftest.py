"""Shared helpers: a coordinator state over a trivial prompt stream, and a valid submission."""

import itertools
import time

from echo2.broadcast.topology import star_plan
from echo2.coordinator.records import Limits
from echo2.coordinator.state import CoordinatorState
from echo2.protocol import Completion, GroupResult, RunSpec, SubmitRequest
from echo2.tasks import Example


def prompt_stream():
    """The trivial, deterministic training stream of :func:`make_state`."""
    return (Example(prompt=f"{i}+0=", answer=str(i)) for i in itertools.count())


def make_state(staleness: int, groups_per_step: int = 2, planner=star_plan, fleet=None,
               heartbeat_timeout_s: float = 60) -> CoordinatorState:
    spec = RunSpec(model="m", dtype="float32", task="arithmetic", task_options={}, group_size=2, temperature=1.0,
                   max_new_tokens=4, groups_per_lease=8, protocol="async", staleness=staleness, fetch_delay_s=0.0,
                   broadcast_stall_s=5.0, broadcast_timeout_s=30.0, heartbeat_interval_s=1.0, seed=0)
    state = CoordinatorState(spec, Limits(group_size=2, max_new_tokens=4, vocab_size=20, reward_range=(0.0, 1.0)),
                             prompt_stream(), groups_per_step=groups_per_step, run_token="t", lease_timeout_s=60,
                             heartbeat_timeout_s=heartbeat_timeout_s, planner=planner, fleet=fleet)
    publish(state, 0)
    return state


def publish(state: CoordinatorState, version: int) -> None:
    """Announce ``version`` as if the learner had published weights (the chunks are not needed here)."""
    state.publish(version, f"{version:064x}", 100 + version)


def valid_submission(lease, version=None):
    groups = [GroupResult(slot=p.slot, completions=[Completion(token_ids=[3, 1], logprobs=[-0.1, -0.2], reward=r)
                                                    for r in (0.0, 1.0)]) for p in lease.prompts]
    return SubmitRequest(lease_id=lease.lease_id, version=lease.version if version is None else version,
                         groups=groups, generate_seconds=0.1)


def submit_all(state, worker, lease):
    return state.submit(worker, valid_submission(lease))


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout_s`` naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s}s for {what}")
        time.sleep(0.2)
