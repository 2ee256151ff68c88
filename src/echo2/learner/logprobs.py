"""Recompute the log-probs (and entropies) of sampled completions under the learner's policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from echo2.model.draws import token_intervals
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
    intervals: tuple[torch.Tensor, torch.Tensor] | None = None
    """(low, high) float64: the interval of [0, 1) whose uniforms draw each token by the verifiable
    rule (:func:`echo2.model.draws.token_intervals`); None unless asked for."""


def completion_scores(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    entropies: bool = False,
    intervals: bool = False,
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
    drawn = token_intervals(logp_all.detach(), tokens) if intervals else None
    return CompletionScores(token_logp, mask, token_entropy, drawn)


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, mask)`` of :func:`completion_scores`, without entropies or intervals."""
    scores = completion_scores(model, prompt_ids, completion_ids, pad_id=pad_id, temperature=temperature)
    return scores.logprobs, scores.mask


def target_logprobs(model: PreTrainedModel, input_ids: list[list[int]], target_ids: list[list[int]], *,
                    pad_id: int, share_prefixes: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, mask)`` [N, T]: the log-prob of ``target_ids[i][t]`` given ``input_ids[i][: t + 1]``
    (position t of the input predicts target t, the layout of a Tinker datum), right-padded;
    gradients flow when the caller has them enabled.

    Datums that begin alike (the G samples of a group: one prompt, G completions) are scored on
    their common beginning's cache, run once (:func:`~echo2.model.tokens.prefill`), their own tokens
    after it — the learner's layout (:func:`completion_scores`), so a client's step costs what echo2's
    own step costs on the same batch instead of G times its prompt. ``share_prefixes=False`` runs
    every datum whole (the same numbers up to float rounding; benchmarks compare).
    """
    if any(len(inputs) != len(targets) for inputs, targets in zip(input_ids, target_ids, strict=True)):
        raise ValueError("each datum needs one target token per input token")
    if not share_prefixes:
        return _whole_target_logprobs(model, input_ids, target_ids, pad_id=pad_id)
    shared = shared_prefix_lengths(input_ids)
    start = prefill(model, [inputs[:length] for inputs, length in zip(input_ids, shared)], pad_id, keep_logits=True)
    assert start.logits is not None and start.owners is not None
    device, width = start.next_logits.device, start.logits.shape[1]
    rests = [inputs[length:] for inputs, length in zip(input_ids, shared)]
    rest_width = max(map(len, rests))
    rest_logp = None
    if rest_width:
        tokens = torch.full((len(rests), rest_width), pad_id, dtype=torch.long)
        rest_mask = torch.zeros((len(rests), rest_width), dtype=torch.long)
        for row, rest in enumerate(rests):
            tokens[row, : len(rest)] = torch.tensor(rest, dtype=torch.long)
            rest_mask[row, : len(rest)] = 1
        tokens, rest_mask = tokens.to(device), rest_mask.to(device)
        position_ids = start.next_position[:, None] + torch.arange(rest_width, device=device)[None, :]
        logits = model(input_ids=tokens, attention_mask=torch.cat([start.attention_mask, rest_mask], dim=1),
                       position_ids=position_ids, past_key_values=start.cache, use_cache=True).logits
        rest_logp = torch.log_softmax(logits.float(), dim=-1)
    prefix_logp = torch.log_softmax(start.logits.float(), dim=-1)
    rows = []
    for row, (targets, length) in enumerate(zip(target_ids, shared)):
        wanted = torch.tensor(targets, dtype=torch.long, device=device)
        columns = torch.arange(width - length, width, device=device)  # the prompt is left-padded
        parts = [prefix_logp[start.owners[row], columns, wanted[:length]]]
        if len(targets) > length:
            assert rest_logp is not None
            parts.append(rest_logp[row, torch.arange(len(targets) - length, device=device), wanted[length:]])
        rows.append(torch.cat(parts))
    logprobs = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    mask = (torch.arange(logprobs.shape[1], device=device)[None, :]
            < torch.tensor([len(t) for t in target_ids], device=device)[:, None]).float()
    return logprobs * mask, mask


def shared_prefix_lengths(input_ids: list[list[int]], least: int = 8) -> list[int]:
    """Per datum, how many of its first tokens to run on a shared cache: the beginning it has in
    common with every datum of its run (datums sorted, neighbours sharing at least ``least`` tokens),
    at least 1 and at most all of it; a datum alone runs all but its last token there."""
    order = sorted(range(len(input_ids)), key=lambda i: input_ids[i])
    lengths = [max(1, len(inputs) - 1) for inputs in input_ids]
    run: list[int] = []
    common = 0

    def close() -> None:
        if len(run) > 1:
            for member in run:
                lengths[member] = max(1, min(common, len(input_ids[member])))

    for index in order:
        if run:
            together = _common_length(input_ids[run[-1]], input_ids[index])
            if together >= least:
                run.append(index)
                common = min(common, together)
                continue
            close()
        run, common = [index], len(input_ids[index])
    close()
    return lengths


def _common_length(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def _whole_target_logprobs(model: PreTrainedModel, input_ids: list[list[int]], target_ids: list[list[int]], *,
                           pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every datum run whole, right-padded, in one forward pass."""
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
