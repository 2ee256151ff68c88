"""Batched autoregressive sampling with per-token behaviour log-probs: the workers' engines and the
learner's evaluation sample through this one module.

A plain KV-cached decoding loop over an HF causal LM rather than ``generate``: RL needs the
log-prob of every sampled token under exactly the distribution it was sampled from
(``softmax(logits / temperature)``), and the learner recomputes that same quantity with the
same batch layout (:mod:`echo2.tokens`), so the two agree to float precision at S = 0. Rows
that share a prompt (a group) share one prefill of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from echo2.decoding import Decoder, DynamicDecoder
from echo2.tokens import model_device, prefill


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
    generator: torch.Generator | None = None,
    share_prompts: bool = True,
    decoder: Decoder | None = None,
) -> Samples:
    """Sample one completion for every row of ``prompt_ids`` (repeat a prompt G times for a group).

    With ``greedy`` the argmax token is taken and ``logprobs`` are those of the
    temperature-scaled distribution all the same. ``share_prompts=False`` runs every row's
    prompt on its own (the cost without :func:`~echo2.tokens.prefill`'s sharing, for benchmarks).
    ``decoder`` runs the per-token steps (:mod:`echo2.decoding`: dynamic by default; a
    :class:`~echo2.decoding.StaticDecoder` replays CUDA graphs) and does not change what is sampled.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    device = model_device(model)
    start = prefill(model, prompt_ids, pad_id, share=share_prompts)
    session = (decoder or DynamicDecoder()).begin(model, start, max_new_tokens)
    logits, rows = start.next_logits, len(prompt_ids)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens, token_logprobs = [], []
    for step in range(max_new_tokens):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        if greedy:
            token = logp.argmax(dim=-1)
        else:
            # drawn where the generator lives (a CPU generator for a model on a GPU): same stream anywhere
            probs = logp.exp() if generator is None else logp.exp().to(generator.device)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(device)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        tokens.append(token)
        token_logprobs.append(logp.gather(-1, token[:, None]).squeeze(-1))
        finished |= token == eos_id
        if step == max_new_tokens - 1 or (step % session.check_every == session.check_every - 1
                                          and bool(finished.all())):
            break
        logits = session.step(token)
    token_matrix = torch.stack(tokens, dim=1).tolist()
    logprob_matrix = torch.stack(token_logprobs, dim=1).tolist()
    completions, logprobs = [], []
    for row_tokens, row_logprobs in zip(token_matrix, logprob_matrix):
        length = row_tokens.index(eos_id) + 1 if eos_id in row_tokens else len(row_tokens)
        completions.append(row_tokens[:length])
        logprobs.append(row_logprobs[:length])
    return Samples(completion_ids=completions, logprobs=logprobs)
