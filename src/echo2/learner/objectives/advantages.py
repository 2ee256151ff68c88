"""Rewards to advantages: group normalisation, DAPO's overlong shaping, degenerate groups.

* **Group-relative advantages** (GRPO, Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300):
  ``A_i = (r_i - mean(r)) / (std(r) + eps)`` over the G completions of one prompt, with the
  unbiased std. Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
  Perspective", arXiv 2503.20783) drops the std: ``A_i = r_i - mean(r)``.
* **Soft overlong punishment** (DAPO, Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement
  Learning System at Scale", arXiv 2503.14476, eq. 13), added to the verified reward before the
  advantages: with ``L_max`` the generation limit and ``L_cache`` the buffer,
  ``R_len(y) = 0`` if ``|y| <= L_max - L_cache``, ``((L_max - L_cache) - |y|) / L_cache`` inside
  the buffer, ``-1`` beyond ``L_max``; scaled by a penalty factor.
* **Degenerate groups**: every completion got the same reward, so every advantage is 0 (EchoRL's
  "advantage degeneration"). A degenerate group is *all-correct* when the common reward reaches
  the success reward, *all-wrong* otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages for rewards shaped [groups, G]: centred per group, optionally std-scaled."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not std_normalize:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment of completions of ``lengths`` tokens (0 when ``buffer`` is 0)."""
    if buffer <= 0:
        return torch.zeros(lengths.shape)
    excess = (lengths.float() - (max_tokens - buffer)).clamp(min=0)
    return -factor * (excess / buffer).clamp(max=1.0)


def is_degenerate(rewards: Sequence[float]) -> bool:
    """Did every completion of the group get the same reward (all advantages zero)?"""
    return max(rewards) == min(rewards)


@dataclass
class Degeneration:
    """Per group ([groups] booleans): degenerate with every reward a success / none a success."""

    all_correct: torch.Tensor
    all_wrong: torch.Tensor


def degeneration(rewards: torch.Tensor, success_reward: float) -> Degeneration:
    """Which groups of ``rewards`` ([groups, G], verified rewards) are all-correct or all-wrong."""
    equal = (rewards == rewards[:, :1]).all(dim=1)
    success = rewards >= success_reward
    return Degeneration(all_correct=equal & success.all(dim=1), all_wrong=equal & ~success.any(dim=1))
