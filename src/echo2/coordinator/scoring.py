"""Rewards computed where the learner trusts them: the coordinator scores every accepted group.

Workers never see a reference answer and report no reward (:mod:`echo2.protocol`): a submission
carries token ids and behaviour log-probs, and the coordinator scores the tokens itself with the
task's verifier. The verifier is injected as a :data:`Scorer` (built in
:mod:`echo2.launch.work` from the task and the tokenizer, see :func:`task_scorer`), so the
coordinator imports nothing of the learner, of the workers or of torch. In a run the task's
verdicts come from processes of their own, each call bounded in time
(:mod:`echo2.coordinator.scoring_processes`): a handler thread cannot be stopped.

:meth:`WorkDesk.submit <echo2.coordinator.work.WorkDesk.submit>` checks a
submission under its lock, scores it here *outside* the lock (a verifier may be slow: math-verify,
a reasoning-gym scorer), then admits it under the lock. :class:`Scoring` keeps the time spent
scoring, which the learner logs as ``reward_seconds``.

Episodes (:mod:`echo2.model.episodes`): between turns a worker asks for the environment's answers
(:meth:`Scoring.answers`, the task's :meth:`~echo2.tasks.Task.respond`, also outside the lock);
the lease keeps each answer. At submission every inserted run of tokens must be, id for id, the
encoding of the answer the environment gave after the replies before it (decoded here from the
submitted model tokens): a worker cannot put words in the environment's mouth. The episode's
reward is then the task's :meth:`~echo2.tasks.Task.episode_reward` of those replies.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from echo2.coordinator.records import Lease
from echo2.coordinator.scoring_processes import ScoringOverrun
from echo2.model.episodes import segments
from echo2.protocol import Completion, RespondRequest, SubmitRequest
from echo2.tasks import Example

#: What the environment answered after the given replies of this episode (KeyError: never asked).
Answered = Callable[[list[str]], "str | None"]
#: ``score(example, completions, answered)`` -> one reward per completion (or episode).
Scorer = Callable[[Example, list[Completion], Answered], list[float]]
#: ``environment(example, replies)`` -> the text inserted before the next turn, or None: the end.
Environment = Callable[[Example, list[str]], "str | None"]

log = logging.getLogger("echo2")


class Verdicts(Protocol):
    """Where an episode's reward comes from: a :class:`~echo2.tasks.Task`, or the task in processes
    of its own (:class:`~echo2.coordinator.scoring_processes.ScoringProcesses`)."""

    def episode_rewards(self, example: Example, episodes: list[list[str]]) -> list[float]: ...

    def respond(self, example: Example, replies: list[str]) -> str | None: ...


def replies_of(index: int, completion: Completion, decode: Callable[[list[int]], str],
               encode: Callable[[str], list[int]], answered: Answered) -> list[str]:
    """The model's replies in ``completion`` (decoded turn by turn), once every inserted run of
    tokens has been checked against what the environment answered; ValueError when one was not."""
    replies: list[str] = []
    for start, end, own in segments(completion.mask or [1] * len(completion.token_ids)):
        ids = completion.token_ids[start:end]
        if own:
            replies.append(decode(ids))
            continue
        try:
            answer = answered(replies)
        except KeyError:
            answer = None
        if answer is None or encode(answer) != ids:
            raise ValueError(f"completion {index}: the tokens inserted after its turn {len(replies)} are not what "
                             f"the environment answered")
    return replies


def task_scorer(task: Verdicts, decode: Callable[[list[int]], str], encode: Callable[[str], list[int]]) -> Scorer:
    """A :data:`Scorer` that reads each completion's replies (:func:`replies_of`) and scores them
    with ``task.episode_rewards``, a group at a time (by default ``task.episode_reward`` of each;
    a single-turn task: ``task.reward`` of its one reply).

    ``decode`` turns a turn's token ids into its text as the learner's evaluation reads a sample
    (``tokenizer.decode(ids, skip_special_tokens=True)``); ``encode`` is how workers insert an
    environment's text (:func:`echo2.model.episodes.observation_ids`).
    """

    def score(example: Example, completions: list[Completion], answered: Answered) -> list[float]:
        return task.episode_rewards(example, [replies_of(i, c, decode, encode, answered)
                                              for i, c in enumerate(completions)])

    return score


@dataclass(frozen=True)
class Unscorable:
    """Why a submission could not be scored; ``code`` is the refusal's (counted in the reliability
    report's ``groups_rejected``): ``scoring_overrun`` when the verdict ran past
    ``coordinator.scoring_timeout_s`` — a completion the verifier chokes on, by accident or by
    design, which the operator wants told apart from a verifier that fails — else ``unscorable``."""

    reason: str
    overrun: bool = False

    @property
    def code(self) -> str:
        return "scoring_overrun" if self.overrun else "unscorable"


@dataclass(frozen=True)
class TaskPrompts:
    """A task's prompts as a run's work: leased to the fleet by the staleness window, each
    submitted group scored here by ``score``, a multi-turn episode answered by ``environment``
    (None: single-turn). A run without them (an agent's episodes, a service's clients) scores nothing."""

    score: Scorer
    environment: Environment | None = None


class Scoring:
    """The run's scorer and environment (``prompts``; None: it leases no task prompts), and the
    seconds spent in them (from any number of HTTP handler threads)."""

    def __init__(self, prompts: TaskPrompts | None) -> None:
        self.score = prompts.score if prompts is not None else None
        self.environment = prompts.environment if prompts is not None else None
        self.seconds = 0.0
        self._lock = threading.Lock()

    def _spent(self, started: float) -> None:
        with self._lock:
            self.seconds += time.perf_counter() - started

    def rewards(self, lease: Lease, request: SubmitRequest) -> list[list[float]] | Unscorable:
        """One reward per completion of every group of ``request`` (checked against ``lease``), in
        the request's order; else why not (the verifier raised, gave not one finite reward per
        completion, or an episode's inserted tokens are not the environment's): a worker must not
        be able to crash the coordinator with odd tokens."""
        if self.score is None:
            return Unscorable("this run leases no task prompts: there is nothing to score")
        started = time.perf_counter()
        try:
            rewards, consulted = [], set()
            for g in request.groups:
                def answered(replies: list[str], slot: int = g.slot) -> str | None:
                    consulted.add((slot, tuple(replies)))
                    return lease.answers[(slot, tuple(replies))]

                rewards.append([float(r) for r in self.score(lease.slots[g.slot], g.completions, answered)])
            if any(len(values) != len(g.completions) or not all(map(math.isfinite, values))
                   for g, values in zip(request.groups, rewards)):
                raise ValueError("not one finite reward per completion")
            if hidden := [key for key, answer in lease.answers.items() if answer is not None and key not in consulted]:
                raise ValueError(f"{len(hidden)} of the environment's answers are in no submitted episode (slot "
                                 f"{hidden[0][0]}, after {len(hidden[0][1])} replies): what was asked must be submitted")
        except Exception as error:  # noqa: BLE001 (any failure of the verifier refuses this submission)
            log.warning("lease %s could not be scored: %s: %s", lease.lease_id, type(error).__name__, error)
            return Unscorable(f"{type(error).__name__}: {error}"[:300], overrun=isinstance(error, ScoringOverrun))
        finally:
            self._spent(started)
        return rewards

    def answers(self, lease: Lease, request: RespondRequest) -> list[str | None]:
        """The environment's answer for each item of ``request`` (None: the episode is over). An
        environment that raises ends that episode (logged): the same replies end it at scoring too."""
        if self.environment is None:
            return [None] * len(request.items)
        started = time.perf_counter()
        answers: list[str | None] = []
        try:
            for item in request.items:
                try:
                    answers.append(self.environment(lease.slots[item.slot], item.replies))
                except Exception as error:  # noqa: BLE001 (a worker's odd reply must not crash the coordinator)
                    log.warning("the environment failed on lease %s slot %d: %s: %s", lease.lease_id, item.slot,
                                type(error).__name__, error)
                    answers.append(None)
        finally:
            self._spent(started)
        return answers
