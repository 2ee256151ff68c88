"""Rewards computed where the learner trusts them: the coordinator scores every accepted group.

Workers never see a reference answer and report no reward (:mod:`echo2.protocol`): a submission
carries token ids and behaviour log-probs, and the coordinator scores the tokens itself with the
task's verifier. The verifier is injected as a :data:`Scorer` (built in
:mod:`echo2.launch.train` from the task and the tokenizer, see :func:`task_scorer`), so the
coordinator imports nothing of the learner, of the workers or of torch.

:meth:`CoordinatorState.submit <echo2.coordinator.state.CoordinatorState.submit>` checks a
submission under its lock, scores it here *outside* the lock (a verifier may be slow: math-verify,
a reasoning-gym scorer), then admits it under the lock. :class:`Scoring` keeps the time spent
scoring, which the learner logs as ``reward_seconds``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from echo2.coordinator.records import Lease
from echo2.protocol import SubmitRequest
from echo2.tasks import Example, Task

#: ``score(example, token_ids_per_completion)`` -> one reward per completion.
Scorer = Callable[[Example, list[list[int]]], list[float]]

log = logging.getLogger("echo2")


def task_scorer(task: Task, decode: Callable[[list[list[int]]], list[str]]) -> Scorer:
    """A :data:`Scorer` that decodes completions with ``decode`` and scores each with ``task.reward``.

    ``decode`` turns each completion's token ids into its text as the learner's evaluation reads a
    sample (and workers did when they scored): ``tokenizer.batch_decode(ids, skip_special_tokens=True)``.
    """

    def score(example: Example, completions: list[list[int]]) -> list[float]:
        return [float(task.reward(example, text)) for text in decode(completions)]

    return score


class Scoring:
    """The run's scorer, and the seconds spent in it (from any number of HTTP handler threads)."""

    def __init__(self, score: Scorer) -> None:
        self.score = score
        self.seconds = 0.0
        self._lock = threading.Lock()

    def rewards(self, lease: Lease, request: SubmitRequest) -> list[list[float]] | None:
        """One reward per completion of every group of ``request`` (checked against ``lease``), in
        the request's order; None when the verifier fails on them (an exception, or not one finite
        reward per completion): a worker must not be able to crash the coordinator with odd tokens."""
        started = time.perf_counter()
        try:
            rewards = [[float(r) for r in self.score(lease.examples[g.slot], [c.token_ids for c in g.completions])]
                       for g in request.groups]
            if any(len(values) != len(g.completions) or not all(map(math.isfinite, values))
                   for g, values in zip(request.groups, rewards)):
                raise ValueError("not one finite reward per completion")
        except Exception as error:  # noqa: BLE001 (any failure of the verifier refuses this submission)
            log.warning("the task's verifier failed on lease %s: %s: %s", lease.lease_id, type(error).__name__, error)
            return None
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - started
        return rewards
