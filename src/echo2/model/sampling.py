"""Batched autoregressive sampling with per-token behaviour log-probs: the workers' engines and the
learner's evaluation sample through this one module.

A plain KV-cached decoding loop over an HF causal LM rather than ``generate``: RL needs the
log-prob of every sampled token under exactly the distribution it was sampled from
(``softmax(logits / temperature)``), and the learner recomputes that same quantity with the
same batch layout (:mod:`echo2.model.tokens`), so the two agree to float precision at S = 0. Rows
that share a prompt (a group) share one prefill of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import torch
from transformers import PreTrainedModel

from echo2.model.continuous import ContinuousBatch, Row
from echo2.model.decoding import Choice, Decoder
from echo2.model.draws import Draws
from echo2.model.tokens import prefill


@dataclass
class Samples:
    """One completion per prompt row; ``completion_ids`` include the EOS token when produced."""

    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    versions: list[list[int]] | None = None
    """Per row, the version of the weights that gave each token's logits (sampled with
    :class:`WeightUpdates`; None: every token at the version held when sampling began)."""

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


RowFinished: TypeAlias = Callable[[int, list[int], list[float], "list[int] | None"], None]
"""Told ``(row, token_ids, log-probs, versions)`` the moment a row's completion is final (versions:
as :attr:`Samples.versions`' row): a streaming worker submits a group as soon as its rows are all
done (ECHO-2's workers as inference engines)."""


class WeightUpdates(Protocol):
    """In-flight updates: the model's weights may change between two decoding steps (PipelineRL,
    AReaL and prime-rl apply a new version mid-sequence), each token then tagged with its version."""

    def held(self) -> int:
        """The version the model holds now."""

    def between_steps(self) -> int:
        """Apply a newer version if one is ready (in place); the version held after."""


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    greedy: bool = False,
    draws: Draws | None = None,
    share_prompts: bool = True,
    decoder: Decoder | None = None,
    finished: RowFinished | None = None,
    updates: WeightUpdates | None = None,
) -> Samples:
    """Sample one completion for every row of ``prompt_ids`` (repeat a prompt G times for a group),
    each token drawn from ``draws`` by the verifiable rule (:mod:`echo2.model.draws`).

    With ``greedy`` the argmax token is taken (no ``draws``) and ``logprobs`` are those of the
    temperature-scaled distribution all the same. ``share_prompts=False`` runs every row's
    prompt on its own (the cost without :func:`~echo2.model.tokens.prefill`'s sharing, for benchmarks).
    ``decoder`` runs the per-token steps: by default a :class:`~echo2.model.continuous.ContinuousBatch`
    (HF's dynamic cache, each row retired when it ends); a :class:`~echo2.model.decoding.StaticDecoder`
    replays CUDA graphs over a fixed batch. Neither changes what is sampled. ``finished`` is told
    each row as it ends (the static decoder: every row at the end). ``updates``: new weights applied
    between two steps of the continuous batch, each token's version in :attr:`Samples.versions`
    (the static decoder's graphs run one version to the end).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not greedy and (draws is None or len(draws.keys) != len(prompt_ids)):
        raise ValueError(f"sampling {len(prompt_ids)} rows needs one draw key per row (echo2.model.draws.Draws)")
    if decoder is None:
        return _continuous(model, prompt_ids, max_new_tokens, eos_id, pad_id, temperature, greedy, draws, share_prompts,
                           finished, updates)
    start = prefill(model, prompt_ids, pad_id, share=share_prompts)
    choice = Choice(temperature=temperature, greedy=greedy, eos_id=eos_id, pad_id=pad_id)
    session = decoder.begin(model, start, max_new_tokens, choice)
    for step in range(max_new_tokens):
        if not greedy:
            assert draws is not None
            session.uniforms.copy_(draws.at(step))
        session.step(last=step == max_new_tokens - 1)
        if step % session.check_every == session.check_every - 1 and bool(session.finished.all()):
            break
    tokens, token_logprobs = session.result()
    token_matrix, logprob_matrix = tokens.tolist(), token_logprobs.tolist()
    completions, logprobs = [], []
    for row_tokens, row_logprobs in zip(token_matrix, logprob_matrix):
        length = row_tokens.index(eos_id) + 1 if eos_id in row_tokens else len(row_tokens)
        completions.append(row_tokens[:length])
        logprobs.append(row_logprobs[:length])
    if finished is not None:
        for row, (row_tokens, row_logprobs) in enumerate(zip(completions, logprobs)):
            finished(row, row_tokens, row_logprobs, None)
    return Samples(completion_ids=completions, logprobs=logprobs)


def _continuous(model: PreTrainedModel, prompt_ids: list[list[int]], max_new_tokens: int, eos_id: int, pad_id: int,
                temperature: float, greedy: bool, draws: Draws | None, share_prompts: bool,
                finished: RowFinished | None, updates: WeightUpdates | None) -> Samples:
    """Every row admitted at once into a :class:`~echo2.model.continuous.ContinuousBatch` and stepped
    until the last ends: a row that ended costs no further forward (a static batch runs it to the
    end of its longest row); between two steps ``updates`` may apply a newer version."""
    offsets = (draws.offsets if draws is not None else None) or [0] * len(prompt_ids)
    rows = [Row(key=index, prompt_ids=prompt, max_new_tokens=max_new_tokens, draw_offset=offsets[index],
                draw_key=None if draws is None else tuple(draws.keys[index]))
            for index, prompt in enumerate(prompt_ids)]
    batch = ContinuousBatch(model, temperature=temperature, eos_id=eos_id, pad_id=pad_id, greedy=greedy,
                            share_prompts=share_prompts)
    held = updates.held() if updates is not None else 0
    batch.admit(rows, held)
    while len(batch):
        for row in batch.step(version=held):
            if finished is not None:
                finished(row.key, row.token_ids, row.logprobs, row.versions if updates is not None else None)
        if updates is not None and len(batch) and (now := updates.between_steps()) != held:
            batch.recompute(now)  # the new version's cache: its log-probs exactly what an audit replays
            held = now
    return Samples(completion_ids=[row.token_ids for row in rows], logprobs=[row.logprobs for row in rows],
                   versions=[row.versions for row in rows] if updates is not None else None)


def stop_length(tokens: list[int], stop_ids: set[int], stop_strings: list[str],
                decode: Callable[[list[int]], str]) -> int | None:
    """How many of ``tokens`` a completion keeps when it ends at its first stop — a token of
    ``stop_ids``, or the token that completes one of ``stop_strings`` in the decoded text (either
    kept) — or None when no stop occurs. A completion sampled past its stop and cut here is a
    sample of the completion that stopped there: each token is drawn given the ones before it."""
    ends = [k + 1 for k, token in enumerate(tokens) if token in stop_ids][:1]
    if stop_strings and any(s in decode(tokens) for s in stop_strings):
        low, high = 1, len(tokens)  # the shortest prefix whose text holds a stop string (containment grows with it)
        while low < high:
            middle = (low + high) // 2
            if any(s in decode(tokens[:middle]) for s in stop_strings):
                high = middle
            else:
                low = middle + 1
        ends.append(low)
    return min(ends) if ends else None


@torch.no_grad()
def prompt_logprobs(model: PreTrainedModel, prompt_ids: list[int], temperature: float = 1.0) -> list[float]:
    """The log-prob of each prompt token after the first given the ones before it, under
    ``softmax(logits / temperature)`` (one forward pass; the sampler's and the audit's)."""
    device = next(model.parameters()).device
    tokens = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    logits = model(input_ids=tokens).logits[0, :-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, tokens[0, 1:, None]).squeeze(-1).tolist()
