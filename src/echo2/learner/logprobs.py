"""Recompute the log-probs (and entropies) of sampled completions under the learner's policy."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from echo2.tokens import left_pad, positions


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token under ``softmax(logits / temperature)``.

    Returns ``(logprobs, mask)``, both [N, max_completion_len], left-aligned per row (token k of
    completion i is at ``[i, k]``); ``mask`` is 1 on real tokens. Uses the sampler's layout
    (:mod:`echo2.tokens`) so that the numbers match the workers' behaviour log-probs.
    """
    sequences = [p + c for p, c in zip(prompt_ids, completion_ids)]
    input_ids, attention_mask = left_pad(sequences, pad_id)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions(attention_mask)).logits
    logp_all = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    token_logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # logp of token t+1 at t
    width = max(len(c) for c in completion_ids)
    out = torch.zeros((len(sequences), width), dtype=token_logp.dtype)
    mask = torch.zeros((len(sequences), width))
    total = input_ids.shape[1]
    for row, completion in enumerate(completion_ids):
        n = len(completion)
        # the completion occupies the last n positions; its logps sit one position earlier
        out[row, :n] = token_logp[row, total - 1 - n : total - 1]
        mask[row, :n] = 1.0
    return out, mask
