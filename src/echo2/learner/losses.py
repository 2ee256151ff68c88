"""Policy-gradient objectives, in one registry.

Implemented now: **GRPO** (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300), in this variant:

* advantages are group-normalised: ``A_i = (r_i - mean(r)) / (std(r) + eps)`` over the G
  completions of one prompt (unbiased std; ``std_normalize=False`` keeps only the mean baseline);
* the per-token surrogate is PPO's clipped ratio (Schulman et al. 2017) against the *behaviour*
  log-probs the worker sampled with, ``rho = exp(logp - logp_behaviour)``:
  ``-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)``;
* stale behaviour policies can make ``rho`` large; for ``A < 0`` the surrogate is additionally
  bounded by ``ratio_cap * A`` (dual-clip PPO, Ye et al. 2020, arXiv 1912.09729), i.e. the
  importance weight is truncated at ``ratio_cap``;
* optional k3 KL to a reference policy (Schulman 2020), off by default;
* aggregation: mean over each sequence's tokens, then mean over the sequences of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages for rewards shaped [groups, G]: centred per group, optionally std-scaled."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not std_normalize:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


@dataclass
class LossTerms:
    loss: torch.Tensor
    """Scalar to backpropagate (already divided by the step's total sequence count)."""
    ratio_mean: float
    ratio_max: float
    ratio_min: float
    clip_fraction: float
    """Fraction of tokens whose ratio left the clip range in the direction that zeroes the gradient."""
    kl: float


def grpo_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_sequences: int,
    clip_low: float,
    clip_high: float,
    ratio_cap: float,
    kl_coef: float = 0.0,
    reference_logprobs: torch.Tensor | None = None,
) -> LossTerms:
    """GRPO loss of one micro-batch. Shapes: [N, T] token tensors, [N] advantages.

    ``total_sequences`` is the number of sequences in the whole step, so that summing the losses
    of all micro-batches gives the per-step mean however the step is split.
    """
    ratio = torch.exp(logprobs - behaviour_logprobs)
    adv = advantages[:, None]
    unclipped, clipped = ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    surrogate = torch.minimum(unclipped, clipped)
    surrogate = torch.where(adv < 0, torch.maximum(surrogate, ratio_cap * adv), surrogate)
    per_token = -surrogate
    kl_value = torch.zeros(())
    if kl_coef > 0:
        if reference_logprobs is None:
            raise ValueError("kl_coef > 0 needs reference log-probs")
        log_ratio = reference_logprobs - logprobs
        kl_token = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + kl_coef * kl_token
        kl_value = (kl_token * mask).sum() / mask.sum()
    lengths = mask.sum(dim=1).clamp(min=1)
    loss = ((per_token * mask).sum(dim=1) / lengths).sum() / total_sequences
    with torch.no_grad():
        real = mask.bool()
        zeroed = ((ratio > 1 + clip_high) & (adv > 0)) | ((ratio < 1 - clip_low) & (adv < 0))
        return LossTerms(
            loss=loss,
            ratio_mean=ratio[real].mean().item(),
            ratio_max=ratio[real].max().item(),
            ratio_min=ratio[real].min().item(),
            clip_fraction=zeroed[real].float().mean().item(),
            kl=float(kl_value),
        )


LOSSES = {"grpo": grpo_loss}
