"""Recompute the log-probs (and entropies) of sampled completions under the learner's policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from echo2.model.tokens import prefill


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


def completion_scores(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    entropies: bool = False,
    share_prompts: bool = True,
) -> CompletionScores:
    """Log-probs (and, when ``entropies``, per-token entropies) of each completion.

    Uses the sampler's layout (:mod:`echo2.model.tokens`) so that the numbers match the workers'
    behaviour log-probs: each distinct prompt is run once (:func:`~echo2.model.tokens.prefill`), which
    also gives the distribution of every completion's first token, then all completions at once
    on top of their prompts' cache, right-padded (a row's padding comes after its tokens, so
    causal attention never sees it). Logits exist only where a completion token is predicted.
    Gradients flow through both passes when the caller has them enabled. ``share_prompts=False``
    runs every row's prompt on its own (benchmarks compare the two).
    """
    start = prefill(model, prompt_ids, pad_id, share=share_prompts)
    device = start.next_logits.device
    lengths = torch.tensor([len(c) for c in completion_ids], device=device)
    width = int(lengths.max())
    mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).float()
    tokens = torch.full((len(completion_ids), width), pad_id, dtype=torch.long)
    for row, completion in enumerate(completion_ids):
        tokens[row, : len(completion)] = torch.tensor(completion, dtype=torch.long)
    tokens = tokens.to(device)
    logits = start.next_logits[:, None, :]
    if width > 1:  # the last token of the widest completion predicts nothing: it is never an input
        attention_mask = torch.cat([start.attention_mask, mask[:, :-1].long()], dim=1)
        position_ids = start.next_position[:, None] + torch.arange(width - 1, device=device)[None, :]
        rest = model(input_ids=tokens[:, :-1], attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=start.cache, use_cache=True).logits
        logits = torch.cat([logits, rest], dim=1)
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    token_logp = logp_all.gather(-1, tokens[:, :, None]).squeeze(-1) * mask
    token_entropy = -(logp_all.exp() * logp_all).sum(dim=-1) * mask if entropies else None
    return CompletionScores(token_logp, mask, token_entropy)


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


def target_logprobs(model: PreTrainedModel, input_ids: list[list[int]], target_ids: list[list[int]], *,
                    pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, mask)`` [N, T]: the log-prob of ``target_ids[i][t]`` given ``input_ids[i][: t + 1]``
    (position t of the input predicts target t, the layout of a Tinker datum), right-padded, one
    forward pass over the whole batch; gradients flow when the caller has them enabled."""
    if any(len(inputs) != len(targets) for inputs, targets in zip(input_ids, target_ids, strict=True)):
        raise ValueError("each datum needs one target token per input token")
    device = next(model.parameters()).device
    width = max(len(row) for row in input_ids)
    tokens = torch.full((len(input_ids), width), pad_id, dtype=torch.long)
    targets = torch.zeros((len(input_ids), width), dtype=torch.long)
    mask = torch.zeros((len(input_ids), width))
    for row, (inputs, wanted) in enumerate(zip(input_ids, target_ids)):
        tokens[row, : len(inputs)] = torch.tensor(inputs, dtype=torch.long)
        targets[row, : len(wanted)] = torch.tensor(wanted, dtype=torch.long)
        mask[row, : len(inputs)] = 1.0
    tokens, targets, mask = tokens.to(device), targets.to(device), mask.to(device)
    logits = model(input_ids=tokens, attention_mask=mask.long()).logits
    logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, :, None]).squeeze(-1)
    return logprobs * mask, mask
