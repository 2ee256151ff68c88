"""The ``eval`` section of a run's config: how often, how much and where held-out evaluation runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from echo2.config.base import Section


class EvalConfig(Section):
    every: int = Field(10, ge=1)
    """Evaluate every this many learner steps (and before the first and after the last)."""
    size: int = Field(500, ge=1)
    """Held-out prompts per evaluation (never trained on)."""
    show: int = Field(4, ge=0)
    """Sample completions printed and logged per evaluation."""
    where: Literal["learner", "process", "after"] = "learner"
    """``learner``: the learner evaluates a due version before its next step (it waits);
    ``process``: an evaluator process beside it does, on the version's weights, while the learner
    keeps training (:mod:`echo2.learner.evaluations`); its results are logged when they arrive,
    timed at the version's publish. ``after``: the same evaluator, started once training ends, so
    that no evaluation shares the CPUs with training (benchmarks of time to an accuracy); each due
    version's weights wait in ``RUN_DIR/evals/`` until then."""
    threads: int = Field(1, ge=1)
    """Torch threads of the evaluator process (``where: process`` or ``after``)."""
    cpus: list[int] | None = None
    """CPUs of the evaluator process (``where: process`` or ``after``; None: the learner's, whose
    process starts it). Under ``after`` the run's workers have stopped when it starts, so it may take
    every core of the host."""
    sampled: bool = True
    """Also play one temperature-``T`` episode per held-out prompt (the sampled reward). Off halves
    an evaluation's cost, for runs that read only the greedy accuracy (a benchmark of time to an
    accuracy)."""
