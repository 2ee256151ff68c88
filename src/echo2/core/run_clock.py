"""The run's two clocks as cost-aware activation reads them: the learner's step time and a
version's dissemination time, each smoothed, and when to re-plan.

ECHO-2's provisioning rule (arXiv 2602.02192, §4) sizes the active fleet from ``T_train`` (one
learner step) and ``T_bcast`` (one version's trip to the fleet). Both are measured where the run
is paced, by the coordinator (``coordinator/state.py``: a step is the learner taking its batch →
publishing the version it trained) and by the simulator (``simulation/engine.py``: the same two
events on its clock). Clock-free: the caller passes the time; no threads, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echo2.core.smoothing import EMA_WEIGHT, ema


@dataclass
class RunClock:
    replan_every: int
    """Re-plan activation every this many published versions (``activation.replan_every``)."""
    train_s: float | None = None
    """Smoothed learner step time (None before the first step)."""
    broadcast_s: float | None = None
    """Smoothed dissemination time: the slowest version's trip among each report (None before one)."""
    batch_taken_at: float | None = None

    def batch_taken(self, now: float) -> None:
        """The learner took (the last part of) a step's batch: its step starts now."""
        self.batch_taken_at = now

    def published(self, version: int, now: float) -> bool:
        """The learner published ``version``: the step since its batch was taken is one sample of
        ``T_train``. Returns whether activation is due a periodic re-plan (a version published
        without a step before it, the first or a resumed one, measures nothing and plans nothing)."""
        if self.batch_taken_at is None:
            return False
        self.step_took(now - self.batch_taken_at)
        self.batch_taken_at = None
        return version % self.replan_every == 0

    def step_took(self, seconds: float) -> None:
        """One sample of ``T_train``: a learner step, or a training service's optimizer step (the
        training it ran since the one before, :mod:`echo2.service.demand`)."""
        self.train_s = ema(self.train_s, seconds, EMA_WEIGHT)

    def disseminated(self, latencies: list[float]) -> None:
        """Versions finished spreading, each taking these seconds from publish to the last worker:
        the slowest is one sample of ``T_bcast``."""
        if latencies:
            self.broadcast_s = ema(self.broadcast_s, max(latencies), EMA_WEIGHT)

    def state(self) -> dict[str, Any]:
        return {"train_s": self.train_s, "broadcast_s": self.broadcast_s}

    def restore(self, state: dict[str, Any]) -> None:
        self.train_s, self.broadcast_s = state["train_s"], state["broadcast_s"]
