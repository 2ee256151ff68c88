"""Batch layout shared by sampling (workers) and log-prob recomputation (learner).

Both sides lay a batch out the same way — each distinct prompt run once (:func:`prefill`),
left-padded, positions counted from the first real token, completion tokens appended after the
prompt's cache — so that at S = 0 the learner's log-probs equal the worker's behaviour log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache


def left_pad(sequences: list[list[int]], pad_id: int,
             device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-align ``sequences`` into ``(input_ids, attention_mask)`` of shape [N, max_len] (on ``device``)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        if sequence:
            input_ids[row, width - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
            attention_mask[row, width - len(sequence) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def model_device(model: torch.nn.Module) -> torch.device:
    """Where ``model``'s parameters live (inputs are built there)."""
    return next(model.parameters()).device


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real token, whatever the padding."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def distinct_prompts(prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts of ``prompt_ids`` in order of first appearance, and each row's index
    into them (a group's G rows share one prompt)."""
    index: dict[tuple[int, ...], int] = {}
    owners = [index.setdefault(tuple(p), len(index)) for p in prompt_ids]
    return [list(p) for p in index], owners


@dataclass
class Prefill:
    """Every row's prompt run through the model, each distinct prompt once, expanded to the rows."""

    cache: Cache
    """KV cache of the prompts, one entry per row (rows sharing a prompt share its values)."""
    next_logits: torch.Tensor
    """[N, vocab] logits at each row's last prompt token: the distribution of its first completion token."""
    attention_mask: torch.Tensor
    """[N, prompt_width] 1 on each row's real prompt tokens (left-padded)."""
    next_position: torch.Tensor
    """[N] position id of each row's first completion token."""
    logits: torch.Tensor | None = None
    """[distinct prompts, prompt_width, vocab] every (left-padded) prompt position's logits, when kept."""
    owners: torch.Tensor | None = None
    """[N] each row's index into the distinct prompts (the first axis of ``logits``)."""


def prefill(model: torch.nn.Module, prompt_ids: list[list[int]], pad_id: int, share: bool = True,
            keep_logits: bool = False) -> Prefill:
    """Run each distinct prompt of ``prompt_ids`` through ``model`` once and give every row its cache.

    Why: the G samples of a group share their prompt, and a chat-templated prompt is often several
    times longer than the answer, so computing it once per group instead of once per sample cuts
    most of the work of sampling and of scoring. Only the last prompt position's logits are
    computed (a 49k vocabulary makes logits the largest tensor of a forward). Gradients flow
    through the cache when the caller has them enabled, so the learner's update is the same as
    with each row's prompt computed on its own — which ``share=False`` does (benchmarks compare).
    ``keep_logits``: also every prompt position's logits (:attr:`Prefill.logits`), for a caller that
    scores the prompt's own tokens.
    """
    distinct, owners = distinct_prompts(prompt_ids) if share else (prompt_ids, list(range(len(prompt_ids))))
    input_ids, attention_mask = left_pad(distinct, pad_id, model_device(model))
    position_ids = positions(attention_mask)
    output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=True, logits_to_keep=0 if keep_logits else 1)
    rows = torch.tensor(owners, device=input_ids.device)
    cache = output.past_key_values
    if owners != list(range(len(distinct))):
        cache.batch_select_indices(rows)
    return Prefill(cache=cache, next_logits=output.logits[rows, -1, :], attention_mask=attention_mask[rows],
                   next_position=position_ids[rows, -1] + 1, logits=output.logits if keep_logits else None,
                   owners=rows)
