"""The loss registry: GRPO, Dr.GRPO, DAPO and GSPO as one composition of parts.

Every objective is ``-surrogate`` (:mod:`.surrogate`, with the truncated, decoupled or no
correction) ``+ kl_coef * k3 KL - entropy_coef * H``, aggregated over the tokens of an update in
the objective's own way, plus the EchoClip auxiliary loss when enabled (:mod:`.echoclip`).
Advantage normalisation, clip ranges and DAPO's dynamic sampling and overlong shaping are
hyper-parameters (``echo2.config.OBJECTIVE_DEFAULTS``); what differs structurally is here:

* ``grpo`` (Shao et al. 2024, arXiv 2402.03300): token ratios; mean over each sequence's
  tokens, then mean over the update's sequences.
* ``dr_grpo`` (Liu et al. 2025, arXiv 2503.20783): token ratios; no length normalisation: each
  sequence's token *sum*, divided by a constant (the generation budget ``max_new_tokens``, as in
  the authors' implementation), mean over sequences.
* ``dapo`` (Yu et al. 2025, arXiv 2503.14476): token ratios; token-level mean: the sum over all
  tokens of the update divided by their number.
* ``gspo`` (Zheng et al. 2025, arXiv 2507.18071): the sequence-level ratio ``s_i``; the
  sequence's surrogate ``min(s_i A_i, clip(s_i) A_i)``, mean over sequences.

The KL term is k3 (Schulman 2020, "Approximating KL divergence") to the initial policy,
``exp(ref - logp) - (ref - logp) - 1``; the entropy bonus uses the per-token entropies of the
learner's forward pass. Both are off by default.

Each micro-batch's loss is already divided by the sizes of the whole update (:class:`Totals`), so
summing the micro-batch losses gives the update's loss however it is split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from echo2.config.base import import_path
from echo2.learner.objectives.echoclip import EchoClipSettings, echoclip_loss
from echo2.learner.objectives.surrogate import (
    RatioStats,
    corrected_surrogate,
    importance_ratios,
    ratio_stats,
)


@dataclass(frozen=True)
class Totals:
    """Sizes of the update a micro-batch belongs to."""

    sequences: int
    tokens: int
    budget: int
    """Generation limit in tokens (Dr.GRPO's constant normaliser)."""
    clips: int = 0
    """EchoClips in the update."""


@dataclass
class TokenBatch:
    """One micro-batch: [N, T] token tensors left-aligned per row, [N] advantages."""

    logprobs: torch.Tensor
    behaviour: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    proximal: torch.Tensor | None = None
    """Log-probs under the policy at the start of the step (decoupled correction or none)."""
    reference: torch.Tensor | None = None
    """Log-probs under the reference policy (KL term)."""
    entropies: torch.Tensor | None = None
    """Per-token entropies with gradient (entropy bonus)."""
    clip_mask: torch.Tensor | None = None
    """1 on EchoClip tokens."""


@dataclass(frozen=True)
class ObjectiveSettings:
    name: str = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    ratio_cap: float = 3.0
    correction: str = "truncated"
    """``truncated``, ``decoupled`` or ``none`` (:func:`.surrogate.corrected_surrogate`)."""

    @property
    def uses_proximal(self) -> bool:
        """Whether the clipped ratio is taken against the proximal policy (recomputed at step start)."""
        return self.correction != "truncated"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    echoclip: EchoClipSettings | None = None


@dataclass
class LossTerms:
    loss: torch.Tensor
    """Scalar to backpropagate: this micro-batch's share of the update's loss."""
    stats: RatioStats
    kl_sum: float = 0.0
    entropy_sum: float = 0.0
    echoclip_loss: float = 0.0
    echoclip_tokens: float = 0.0

    @property
    def ratio_mean(self) -> float:
        return self.stats.ratio_sum / max(self.stats.tokens, 1.0)

    @property
    def clip_fraction(self) -> float:
        return self.stats.clipped / max(self.stats.tokens, 1.0)

    @property
    def kl(self) -> float:
        return self.kl_sum / max(self.stats.tokens, 1.0)


def sequence_mean_aggregate(per_token: torch.Tensor, mask: torch.Tensor, totals: Totals) -> torch.Tensor:
    lengths = mask.sum(dim=1).clamp(min=1)
    return ((per_token * mask).sum(dim=1) / lengths).sum() / totals.sequences


def budget_aggregate(per_token: torch.Tensor, mask: torch.Tensor, totals: Totals) -> torch.Tensor:
    return (per_token * mask).sum() / (totals.sequences * totals.budget)


def token_mean_aggregate(per_token: torch.Tensor, mask: torch.Tensor, totals: Totals) -> torch.Tensor:
    return (per_token * mask).sum() / totals.tokens


@dataclass(frozen=True)
class Objective:
    """What makes one objective another: the interface of ``learner.loss``. One of your own is an
    instance of this named by import path (``learner.loss=my_module:my_objective``), e.g. the
    token-level mean over sequence ratios; the rest of the loss (the corrected surrogate, KL,
    entropy, EchoClip) is composed around it as for the built-ins."""

    sequence_level: bool
    """GSPO's sequence-level ratio instead of token ratios."""
    aggregate: Callable[[torch.Tensor, torch.Tensor, Totals], torch.Tensor] = field(repr=False)
    """The per-token loss ``[N, T]``, its mask and the update's sizes -> this micro-batch's share of
    the update's loss (:class:`Totals`: dividing by the whole update's sizes makes micro-batches add up)."""


OBJECTIVES: dict[str, Objective] = {
    "grpo": Objective(sequence_level=False, aggregate=sequence_mean_aggregate),
    "dr_grpo": Objective(sequence_level=False, aggregate=budget_aggregate),
    "dapo": Objective(sequence_level=False, aggregate=token_mean_aggregate),
    "gspo": Objective(sequence_level=True, aggregate=sequence_mean_aggregate),
}


def resolve_objective(name: str) -> Objective:
    """The objective ``learner.loss`` names: a built-in (:data:`OBJECTIVES`) or ``module:name``
    naming an :class:`Objective`; else a ValueError naming the key."""
    if name in OBJECTIVES:
        return OBJECTIVES[name]
    found = import_path(name, f"learner.loss={name!r}")
    if not isinstance(found, Objective):
        raise ValueError(f"learner.loss={name!r} is a {type(found).__name__}, not an echo2.learner.objectives.Objective")
    return found


def k3_kl(logprobs: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    log_ratio = reference - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


def objective_loss(batch: TokenBatch, settings: ObjectiveSettings, totals: Totals) -> LossTerms:
    """The configured objective on one micro-batch."""
    objective = resolve_objective(settings.name)
    ratios = importance_ratios(batch.logprobs, batch.behaviour, batch.proximal, batch.mask, objective.sequence_level)
    adv = batch.advantages[:, None]
    clip = {"clip_low": settings.clip_low, "clip_high": settings.clip_high}
    per_token = -corrected_surrogate(ratios, adv, **clip, cap=settings.ratio_cap,
                                     correction=settings.correction)
    terms = LossTerms(loss=torch.zeros(()), stats=ratio_stats(ratios, adv, batch.mask, **clip, cap=settings.ratio_cap))
    if settings.kl_coef > 0:
        if batch.reference is None:
            raise ValueError("kl_coef > 0 needs reference log-probs")
        kl = k3_kl(batch.logprobs, batch.reference)
        per_token = per_token + settings.kl_coef * kl
        terms.kl_sum = float((kl.detach() * batch.mask).sum())
    if settings.entropy_coef > 0:
        if batch.entropies is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropies")
        per_token = per_token - settings.entropy_coef * batch.entropies
    if batch.entropies is not None:
        terms.entropy_sum = float((batch.entropies.detach() * batch.mask).sum())
    terms.loss = objective.aggregate(per_token, batch.mask, totals)
    if settings.echoclip is not None and batch.clip_mask is not None:
        anchor = batch.behaviour if batch.proximal is None else batch.proximal
        auxiliary = echoclip_loss(batch.logprobs, anchor, batch.clip_mask, settings.echoclip, totals.clips)
        terms.loss = terms.loss + auxiliary
        terms.echoclip_loss, terms.echoclip_tokens = float(auxiliary.detach()), float(batch.clip_mask.sum())
    return terms
