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

import torch
from transformers import PreTrainedModel

from echo2.model.decoding import Choice, Decoder, DynamicDecoder
from echo2.model.draws import Draws
from echo2.model.tokens import prefill


@dataclass
class Samples:
    """One completion per prompt row; ``completion_ids`` include the EOS token when produced."""

    completion_ids: list[list[int]]
    logprobs: list[list[float]]

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


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
) -> Samples:
    """Sample one completion for every row of ``prompt_ids`` (repeat a prompt G times for a group),
    each token drawn from ``draws`` by the verifiable rule (:mod:`echo2.model.draws`).

    With ``greedy`` the argmax token is taken (no ``draws``) and ``logprobs`` are those of the
    temperature-scaled distribution all the same. ``share_prompts=False`` runs every row's
    prompt on its own (the cost without :func:`~echo2.model.tokens.prefill`'s sharing, for benchmarks).
    ``decoder`` runs the per-token steps (:mod:`echo2.model.decoding`: dynamic by default; a
    :class:`~echo2.model.decoding.StaticDecoder` replays CUDA graphs) and does not change what is sampled.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not greedy and (draws is None or len(draws.keys) != len(prompt_ids)):
        raise ValueError(f"sampling {len(prompt_ids)} rows needs one draw key per row (echo2.model.draws.Draws)")
    start = prefill(model, prompt_ids, pad_id, share=share_prompts)
    choice = Choice(temperature=temperature, greedy=greedy, eos_id=eos_id, pad_id=pad_id)
    session = (decoder or DynamicDecoder()).begin(model, start, max_new_tokens, choice)
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
    return Samples(completion_ids=completions, logprobs=logprobs)


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
