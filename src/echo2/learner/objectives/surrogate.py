"""Importance ratios, the staleness-aware correction, and PPO's clipped surrogate.

Notation: ``pi_behav`` generated the group (its log-probs come from the worker), ``pi_prox`` is
the learner's policy at the start of the step (recomputed, no gradient), ``pi_theta`` is the
policy being optimised, ``A`` the advantage, ``eps_low`` / ``eps_high`` the clip ranges.

* **Clipped surrogate** (PPO, Schulman et al. 2017, arXiv 1707.06347), with decoupled ranges
  (DAPO's clip-higher, arXiv 2503.14476): ``min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``.
* **Truncated correction** (``truncated``): ``r = pi_theta / pi_behav``; for ``A < 0`` the surrogate
  is also bounded below by ``cap * A`` (dual-clip PPO, Ye et al. 2020, arXiv 1912.09729), so the
  importance weight against a stale behaviour policy is truncated at ``cap`` in both signs (for
  ``A > 0`` the PPO clip already bounds it).
* **Decoupled correction** (``decoupled``; Fu et al. 2025, "AReaL: A Large-Scale Asynchronous
  Reinforcement Learning System for Language Reasoning", arXiv 2505.24298, decoupled PPO):
  ``w * min(r A, clip(r) A)`` with ``r = pi_theta / pi_prox`` and the behaviour weight
  ``w = min(pi_prox / pi_behav, cap)`` (no gradient). AReaL drops tokens whose weight exceeds the
  cap; echo2 truncates them, so that a stale token still counts, at most ``cap`` times.
* **Sequence level** (GSPO, Zheng et al. 2025, "Group Sequence Policy Optimization",
  arXiv 2507.18071): both log-ratios are averaged over the sequence's tokens first,
  ``s_i = exp(mean_t log(pi_theta / pi_anchor))``, and the sequence's value is used at each of
  its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Ratios:
    """[N, T] ratios of one micro-batch."""

    policy: torch.Tensor
    """The clipped ratio (carries the gradient): pi_theta / pi_behav, or pi_theta / pi_prox when decoupled."""
    behaviour: torch.Tensor
    """Importance weight against the behaviour policy, no gradient: pi_theta / pi_behav, or
    pi_prox / pi_behav when decoupled (before truncation)."""


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of each row's real tokens, [N]."""
    return (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


def importance_ratios(logprobs: torch.Tensor, behaviour: torch.Tensor, proximal: torch.Tensor | None,
                      mask: torch.Tensor, sequence_level: bool = False) -> Ratios:
    """Token (or, with ``sequence_level``, GSPO's length-normalised sequence) ratios; ``proximal``
    given means the decoupled correction."""
    if proximal is None:
        log_policy, log_behaviour = logprobs - behaviour, logprobs.detach() - behaviour
    else:
        log_policy, log_behaviour = logprobs - proximal, proximal - behaviour
    if sequence_level:
        log_policy = sequence_mean(log_policy, mask)[:, None].expand_as(mask)
        log_behaviour = sequence_mean(log_behaviour, mask)[:, None].expand_as(mask)
    return Ratios(policy=torch.exp(log_policy), behaviour=torch.exp(log_behaviour))


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float,
                      clip_high: float) -> torch.Tensor:
    """PPO's ``min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)`` per token (``advantages`` [N, 1])."""
    unclipped, clipped = ratio * advantages, ratio.clamp(1 - clip_low, 1 + clip_high) * advantages
    return torch.minimum(unclipped, clipped)


def corrected_surrogate(ratios: Ratios, advantages: torch.Tensor, *, clip_low: float, clip_high: float,
                        cap: float, decoupled: bool) -> torch.Tensor:
    """The per-token surrogate to maximise, with the truncated or the decoupled correction."""
    surrogate = clipped_surrogate(ratios.policy, advantages, clip_low, clip_high)
    if decoupled:
        return ratios.behaviour.clamp(max=cap) * surrogate
    return torch.where(advantages < 0, torch.maximum(surrogate, cap * advantages), surrogate)


@dataclass
class RatioStats:
    """Sums over the real tokens of a micro-batch (merged by addition; max/min by max/min)."""

    tokens: float = 0.0
    ratio_sum: float = 0.0
    ratio_max: float = float("-inf")
    ratio_min: float = float("inf")
    clipped: float = 0.0
    """Tokens whose ratio left the clip range in the direction that zeroes their gradient."""
    weight_sum: float = 0.0
    weight_max: float = float("-inf")
    truncated: float = 0.0
    """Tokens whose behaviour weight exceeds the cap."""

    def merge(self, other: RatioStats) -> None:
        self.tokens += other.tokens
        self.ratio_sum += other.ratio_sum
        self.clipped += other.clipped
        self.weight_sum += other.weight_sum
        self.truncated += other.truncated
        self.ratio_max, self.ratio_min = max(self.ratio_max, other.ratio_max), min(self.ratio_min, other.ratio_min)
        self.weight_max = max(self.weight_max, other.weight_max)


@torch.no_grad()
def ratio_stats(ratios: Ratios, advantages: torch.Tensor, mask: torch.Tensor, *, clip_low: float,
                clip_high: float, cap: float) -> RatioStats:
    real = mask.bool()
    if not real.any():
        return RatioStats()
    ratio, weight = ratios.policy[real], ratios.behaviour[real]
    adv = advantages.expand_as(mask)[real]
    zeroed = ((ratio > 1 + clip_high) & (adv > 0)) | ((ratio < 1 - clip_low) & (adv < 0))
    return RatioStats(tokens=float(real.sum()), ratio_sum=float(ratio.sum()), ratio_max=float(ratio.max()),
                      ratio_min=float(ratio.min()), clipped=float(zeroed.sum()), weight_sum=float(weight.sum()),
                      weight_max=float(weight.max()), truncated=float((weight > cap).sum()))
