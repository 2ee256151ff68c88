"""EchoClip: an auxiliary loss that recovers signal from advantage-degenerated groups.

EchoRL ("EchoRL: Reinforcement Learning via Rollout Echoing", arXiv 2605.31228, ICML 2026):
when every rollout of a group is a verified success, the group-normalised advantages are all 0
and the group teaches the policy gradient nothing. EchoRL selects from each verified-success
rollout an **EchoClip**: the prefix that ends with the rollout's highest-entropy *step* (steps
are segments of the completion that end with a delimiter token; the authors' scripts use
newlines), where the entropy of a token is ``H_t = -sum_v p(v) log p(v)`` of the policy's
next-token distribution. The clips get an auxiliary loss added to the RL loss with its own
weight (the authors' script: 0.001):

    L = L_RL + weight * (1 / |C|) * sum_{c in C} (1 / |c|) * sum_{t in c} l_t

Choices the paper leaves open, made here and exposed in ``learner.echoclip``:

* which rollouts (``scope``): those of all-success groups (default), or every success;
* how token entropies make a step's entropy (``step_entropy``): mean (default), max or sum; ties
  go to the earliest step; the entropies are those of the policy at the start of the step;
* step boundaries (``step_delimiters``): tokens whose text contains a newline (the paper) or
  ``=`` (the end of a worked step of the arithmetic task); none given: every token is a step;
* the per-token loss ``l_t`` (``objective``): ``nll`` = ``-log pi_theta(y_t)`` (the paper's
  auxiliary supervised loss, the default), or ``clipped`` = PPO's clipped surrogate with advantage
  1, ``-min(r_t, clip(r_t, 1 - clip, 1 + clip))`` with ``r_t`` the ratio the objective clips
  (against the behaviour or the proximal policy), which stops pushing a token once its
  probability rose ``clip`` above the anchor's;
* normalisation: token mean within a clip, mean over the clips of the update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedTokenizerBase

from echo2.learner.objectives.surrogate import LOG_RATIO_LIMIT, clipped_surrogate, sequence_mean


@dataclass(frozen=True)
class EchoClipSettings:
    weight: float
    objective: Literal["nll", "clipped"] = "nll"
    clip: float = 0.2
    scope: Literal["degenerate", "success"] = "degenerate"
    step_entropy: Literal["mean", "max", "sum"] = "mean"
    success_reward: float = 1.0
    delimiters: frozenset[int] = frozenset()
    """Token ids that end a step; empty: every token is a step."""


def delimiter_ids(tokenizer: PreTrainedTokenizerBase, delimiters: list[str]) -> frozenset[int]:
    """Ids of the tokens whose text contains one of ``delimiters``."""
    if not delimiters:
        return frozenset()
    return frozenset(i for i in range(len(tokenizer)) if any(d in tokenizer.decode([i]) for d in delimiters))


def candidates(rewards: torch.Tensor, settings: EchoClipSettings) -> torch.Tensor:
    """Which rollouts ([groups, G] rewards, flattened to [groups * G]) an EchoClip is taken from."""
    success = rewards >= settings.success_reward
    if settings.scope == "degenerate":
        success = success & success.all(dim=1, keepdim=True)
    return success.flatten()


def step_ends(token_ids: list[int], delimiters: frozenset[int]) -> list[int]:
    """Exclusive end of each step: after every delimiter token, and at the end of the completion."""
    if not delimiters:
        return list(range(1, len(token_ids) + 1))
    ends = [k + 1 for k, token in enumerate(token_ids) if token in delimiters]
    return ends if ends and ends[-1] == len(token_ids) else [*ends, len(token_ids)]


def clip_length(entropies: torch.Tensor, token_ids: list[int], settings: EchoClipSettings) -> int:
    """Tokens in the EchoClip of a completion: up to the end of its highest-entropy step."""
    ends = step_ends(token_ids, settings.delimiters)
    reduce = {"mean": torch.mean, "max": torch.max, "sum": torch.sum}[settings.step_entropy]
    values = torch.stack([reduce(entropies[start:end]) for start, end in zip([0, *ends[:-1]], ends)])
    return ends[int(values.argmax())]


def echoclip_loss(logprobs: torch.Tensor, anchor: torch.Tensor, clip_mask: torch.Tensor,
                  settings: EchoClipSettings, clips: int) -> torch.Tensor:
    """This micro-batch's share of ``weight * mean over the update's clips of the clip's token-mean
    loss`` (``clips``: clips in the whole update; rows without a clip have an all-zero mask)."""
    if settings.objective == "nll":
        per_token = -logprobs
    else:
        ratio = torch.exp((logprobs - anchor).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
        per_token = -clipped_surrogate(ratio, torch.ones_like(ratio), settings.clip, settings.clip)
    return settings.weight * sequence_mean(per_token, clip_mask).sum() / max(clips, 1)
