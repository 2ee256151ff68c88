"""Batch layout shared by sampling (workers) and log-prob recomputation (learner).

Both sides lay a batch out the same way — left-padded, positions counted from the first real
token — so that at S = 0 the learner's log-probs equal the worker's behaviour log-probs.
"""

from __future__ import annotations

import torch


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
