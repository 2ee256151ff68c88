"""A coordinator state over a trivial prompt stream, scoring as the real task does, and valid
submissions: what most coordinator and books tests start from (the shipped tokenizer's ids, without
loading it)."""

from __future__ import annotations

import itertools

from echo2.broadcast.topology import star_plan
from echo2.coordinator.books import Training
from echo2.coordinator.records import Limits
from echo2.coordinator.scoring import TaskPrompts, task_scorer
from echo2.coordinator.state import CoordinatorState
from echo2.protocol import Completion, GroupResult, RunSpec, SubmitRequest, VersionInfo
from echo2.tasks import ArithmeticTask, Example

#: The shipped tokenizer's ids (0-2 special: pad, eos, unk), without loading it.
VOCAB = {3 + digit: str(digit) for digit in range(10)} | {13: "+", 14: "-", 15: "*", 16: "="}
EOS = 1


def decode(ids: list[int]) -> str:
    """Token ids to text as the shipped tokenizer decodes them (special tokens skipped)."""
    return "".join(VOCAB.get(token, "") for token in ids)


def encode(text: str) -> list[int]:
    return [next(token for token, piece in VOCAB.items() if piece == char) for char in text]


#: What :func:`make_state`'s coordinator scores with: the arithmetic task's verdict.
SCORE = task_scorer(ArithmeticTask(), decode, encode)


def prompt_stream():
    """The trivial, deterministic training stream of :func:`make_state`."""
    return (Example(prompt=f"{i}+0=", answer=str(i)) for i in itertools.count())


def make_state(staleness: int, groups_per_step: int = 2, planner=star_plan, fleet=None,
               heartbeat_timeout_s: float = 60, score=SCORE, task=None, on_interval=None, sources=()) -> CoordinatorState:
    """A coordinator over :func:`prompt_stream`; ``task``: an environment task (its scorer, its
    answers and its turn limit) instead of single-turn arithmetic; ``sources``: its work sources
    (:mod:`echo2.coordinator.sources`)."""
    turns = task.max_turns if task is not None else 1
    spec = RunSpec(model="m", dtype="float32", group_size=2, temperature=1.0,
                   max_new_tokens=4, groups_per_lease=8, protocol="async", staleness=staleness, fetch_delay_s=0.0,
                   broadcast_stall_s=5.0, broadcast_timeout_s=30.0, heartbeat_interval_s=1.0, seed=0, max_turns=turns)
    prompts = TaskPrompts(task_scorer(task, decode, encode), task.respond) if task is not None else TaskPrompts(score)
    state = CoordinatorState(spec, Limits(group_size=2, max_new_tokens=4, vocab_size=20, max_turns=turns),
                             training=Training(prompt_stream(), groups_per_step), prompts=prompts, run_token="t",
                             lease_timeout_s=60, heartbeat_timeout_s=heartbeat_timeout_s, planner=planner, fleet=fleet,
                             **({"on_interval": on_interval} if on_interval is not None else {}))
    for source in sources:
        state.add_source(source)
    publish(state, 0)
    return state


def publish(state: CoordinatorState, version: int) -> None:
    """Announce ``version`` as if the learner had published weights (the chunks are not needed here)."""
    state.publish(VersionInfo(version=version, sha256=f"{version:064x}", size_bytes=100 + version))


def answering(prompt: str, correct: list[bool]) -> list[Completion]:
    """Completions of a ``make_state`` prompt (``"k+0="``) that state the answer ``k`` or not."""
    answer = int(prompt.split("+")[0])
    texts = [str(answer if right else answer + 1) for right in correct]
    return [Completion(token_ids=encode(text) + [EOS], logprobs=[-0.1] * (len(text) + 1)) for text in texts]


def valid_submission(lease, version=None):
    """Two completions per prompt: ``0`` and ``1`` (their rewards are the coordinator's verdict)."""
    groups = [GroupResult(slot=p.slot, completions=[Completion(token_ids=[3, EOS], logprobs=[-0.1, -0.2]),
                                                    Completion(token_ids=[4, EOS], logprobs=[-0.1, -0.2])])
              for p in lease.prompts]
    return SubmitRequest(lease_id=lease.lease_id, version=lease.version if version is None else version,
                         groups=groups, generate_seconds=0.1)


def submit_all(state, worker, lease):
    return state.work.submit(worker, valid_submission(lease))

