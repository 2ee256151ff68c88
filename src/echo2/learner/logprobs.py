"""Recompute the log-probs (and entropies) of sampled completions under the learner's policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from echo2.tokens import left_pad, model_device, positions


@dataclass
class CompletionScores:
    """Per-token scores of N completions, each [N, max_completion_len], left-aligned per row
    (token k of completion i is at ``[i, k]``)."""

    logprobs: torch.Tensor
    """Log-prob of each sampled token under ``softmax(logits / temperature)``; 0 on padding."""
    mask: torch.Tensor
    """1 on real tokens, 0 on padding."""
    entropies: torch.Tensor | None = None
    """Entropy ``-sum_v p(v) log p(v)`` of the distribution each token was drawn from (same
    temperature); None unless asked for."""


def _left_align(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Rows of ``values`` ([N, L], one entry per position predicting the next token) cut down to
    their completions: a completion of n tokens occupies the last n positions of its left-padded
    sequence, so its scores sit one position earlier."""
    total = values.shape[1] + 1
    out = torch.zeros((len(lengths), max(lengths)), dtype=values.dtype, device=values.device)
    for row, n in enumerate(lengths):
        out[row, :n] = values[row, total - 1 - n : total - 1]
    return out


def completion_scores(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    entropies: bool = False,
) -> CompletionScores:
    """Log-probs (and, when ``entropies``, per-token entropies) of each completion in one forward pass.

    Uses the sampler's layout (:mod:`echo2.tokens`) so that the numbers match the workers'
    behaviour log-probs. Gradients flow through both when the caller has them enabled.
    """
    sequences = [p + c for p, c in zip(prompt_ids, completion_ids)]
    input_ids, attention_mask = left_pad(sequences, pad_id, model_device(model))
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions(attention_mask)).logits
    logp_all = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    token_logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # logp of token t+1 at t
    lengths = [len(c) for c in completion_ids]
    mask = torch.zeros((len(sequences), max(lengths)), device=input_ids.device)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1.0
    token_entropy = None
    if entropies:
        token_entropy = _left_align(-(logp_all.exp() * logp_all).sum(dim=-1), lengths)
    return CompletionScores(_left_align(token_logp, lengths), mask, token_entropy)


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, mask)`` of :func:`completion_scores`, without entropies."""
    scores = completion_scores(model, prompt_ids, completion_ids, pad_id=pad_id, temperature=temperature)
    return scores.logprobs, scores.mask
