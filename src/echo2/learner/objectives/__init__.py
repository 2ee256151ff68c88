"""Policy-gradient objectives (GRPO, Dr.GRPO, DAPO, GSPO), the staleness-aware correction and
EchoClip; see docs/objectives.md for the formulas and the choices made.

* ``registry.py`` — the loss registry and an ``Objective`` of the user's own by import path;
* ``advantages.py`` — group advantages, and which groups are degenerate;
* ``surrogate.py`` — the clipped surrogates and off-policy corrections;
* ``echoclip.py`` — EchoClip: a learning signal from advantage-degenerated groups (EchoRL);
* ``tinker_losses.py`` — the Tinker API's losses, for the training service.
"""

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
    Objective,
    ObjectiveSettings,
    TokenBatch,
    Totals,
    budget_aggregate,
    objective_loss,
    resolve_objective,
    sequence_mean_aggregate,
    token_mean_aggregate,
)
from echo2.learner.objectives.surrogate import RatioStats, implausible_rows

__all__ = [
    "OBJECTIVES",
    "Degeneration",
    "EchoClipSettings",
    "LossTerms",
    "Objective",
    "ObjectiveSettings",
    "RatioStats",
    "TokenBatch",
    "Totals",
    "budget_aggregate",
    "candidates",
    "clip_length",
    "degeneration",
    "delimiter_ids",
    "group_advantages",
    "implausible_rows",
    "is_degenerate",
    "objective_loss",
    "overlong_penalty",
    "resolve_objective",
    "sequence_mean_aggregate",
    "token_mean_aggregate",
]
