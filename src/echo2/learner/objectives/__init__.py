"""Policy-gradient objectives (GRPO, Dr.GRPO, DAPO, GSPO), the staleness-aware correction and
EchoClip; see docs/objectives.md for the formulas and the choices made."""

from echo2.learner.objectives.advantages import (
    Degeneration,
    degeneration,
    group_advantages,
    is_degenerate,
    overlong_penalty,
)
from echo2.learner.objectives.echoclip import EchoClipSettings, candidates, clip_length, delimiter_ids
from echo2.learner.objectives.registry import (
    OBJECTIVES,
    LossTerms,
    ObjectiveSettings,
    TokenBatch,
    Totals,
    objective_loss,
)
from echo2.learner.objectives.surrogate import RatioStats, implausible_rows

__all__ = [
    "OBJECTIVES",
    "Degeneration",
    "EchoClipSettings",
    "LossTerms",
    "ObjectiveSettings",
    "RatioStats",
    "TokenBatch",
    "Totals",
    "candidates",
    "clip_length",
    "degeneration",
    "delimiter_ids",
    "group_advantages",
    "implausible_rows",
    "is_degenerate",
    "objective_loss",
    "overlong_penalty",
]
