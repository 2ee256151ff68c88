"""Verifiable sampling: every sampled token is drawn from randomness the worker did not choose, by
a rule any auditor can replay on any device.

A worker that returns text of its choice with the true log-probs of that text passes a log-prob
audit: the numbers are honest, only the draw was not. So the coordinator fixes the randomness of
each lease (``LeaseResponse.draw_seed``, a seed the worker cannot pick; a client's own ``seed`` is
used instead where it gave one), and every engine draws the token at position ``p`` of row ``r``
(:func:`row_key`) by the one rule here:

1. ``u = uniform(seed, r, p)`` (:mod:`echo2.core.draw_rule`): SplitMix64 of the key, a float64 in
   [0, 1), in integer arithmetic: the same ``u`` on every machine, CPU or GPU, whatever the library.
2. The token is the inverse CDF of ``softmax(logits / T)`` at ``u``, the vocabulary in id order,
   summed in float64: the first token whose cumulative probability exceeds ``u`` times the total.
   An exact draw from the distribution (inverse transform sampling), one uniform per token.

The audit, which already recomputes the policy's distribution at the group's version, also
checks that ``u`` falls in the reported token's interval ``[cdf(t-1), cdf(t))`` (:func:`draw_gaps`);
a worker whose distribution differs from the auditor's only by arithmetic (bf16 against float32,
one device against another, a KV-cached decode against a whole forward pass) moves the interval's
ends by about that difference, so a token is accepted within ``verification.draw_tolerance`` of its
interval (near-ties; :data:`DRAW_TOLERANCE` by the workers' dtype when unset). A substituted token,
one answer repeated in every row of a group, or samples picked from several tries each land
outside their intervals at once. Greedy decoding (evaluation) draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from echo2.core.draw_rule import row_key, splitmix64, uniform

__all__ = ["DRAW_TOLERANCE", "Draws", "draw_gaps", "draw_tolerance", "inverse_cdf", "row_key", "splitmix64",
           "token_intervals", "uniform"]

@dataclass(frozen=True)
class Draws:
    """The uniforms of a batch of rows: row ``i`` draws its token at step ``s`` with
    ``uniform(keys[i][0], keys[i][1], offsets[i] + s)`` (``offsets``: each row's model tokens
    before this call, an episode's earlier turns; None: 0)."""

    keys: Sequence[tuple[int, int]]
    offsets: Sequence[int] | None = None

    @classmethod
    def seeded(cls, seed: int, rows: int) -> Draws:
        """Rows 0..rows-1 under one seed (evaluation, benchmarks, tests)."""
        return cls([(seed, row) for row in range(rows)])

    def select(self, rows: Sequence[int], offsets: Sequence[int]) -> Draws:
        """The draws of ``rows`` of this batch, each from its ``offsets`` on (an episode's next turn)."""
        return Draws([self.keys[row] for row in rows], list(offsets))

    def at(self, step: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """[rows] float64: every row's uniform for its token at ``step`` of this call."""
        offsets = self.offsets or [0] * len(self.keys)
        values = [uniform(seed, row, offset + step) for (seed, row), offset in zip(self.keys, offsets, strict=True)]
        return torch.tensor(values, dtype=torch.float64, device=device)


#: ``verification.draw_tolerance`` when the config leaves it unset, by the workers' ``model.dtype``:
#: how far an honest worker's draw was measured to fall outside its interval under the auditor's
#: arithmetic (``bench/draws.py``): float32 at most 4e-7; bfloat16 0.042 over 1,417 tokens of
#: SmolLM2 and 0.072 in an agent run's longer contexts (a KV-cached decode against one whole
#: forward pass, in bf16), so three times that.
DRAW_TOLERANCE = {"float32": 0.01, "bfloat16": 0.2, "float16": 0.2}

#: ... and with ``rollout.engine=llamacpp`` at least this: llama.cpp's quantized kernels (activations
#: rounded to 8 bits against the learner's float32 on the same dequantized weights) put an honest
#: SmolLM2 Q4_1 draw up to 0.019 outside its interval at temperature 1 and 0.075 at 0.5
#: (``tests/integration/test_llamacpp_engine.py``), so the bf16 bound.
QUANTIZED_ENGINE_DRAW_TOLERANCE = 0.2


def draw_tolerance(configured: float | None, dtype: str, engine: str = "hf") -> float:
    """The tolerance the audits use: ``configured``, else :data:`DRAW_TOLERANCE` for ``dtype``
    (raised to :data:`QUANTIZED_ENGINE_DRAW_TOLERANCE` for the llama.cpp engine)."""
    if configured is not None:
        return configured
    by_dtype = DRAW_TOLERANCE.get(dtype, max(DRAW_TOLERANCE.values()))
    return max(by_dtype, QUANTIZED_ENGINE_DRAW_TOLERANCE) if engine == "llamacpp" else by_dtype


def inverse_cdf(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[rows] the token each row draws: the first whose cumulative probability under ``logp``
    ([rows, vocab] log-probs) exceeds ``u`` ([rows] float64 in [0, 1)) times the row's total."""
    cdf = logp.exp().double().cumsum(dim=-1)
    target = (u * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=logp.shape[-1] - 1)


def token_intervals(logp: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi), each shaped like ``tokens``: the interval of [0, 1) in which a uniform draws each
    token under ``logp`` (``tokens.shape + [vocab]`` log-probs), by :func:`inverse_cdf`'s rule."""
    lows, highs = [], []
    flat_logp, flat_tokens = logp.reshape(-1, logp.shape[-1]), tokens.reshape(-1)
    for start in range(0, len(flat_tokens), 64):  # float64 cumulative sums a few rows at a time
        cdf = flat_logp[start:start + 64].exp().double().cumsum(dim=-1)
        picked = flat_tokens[start:start + 64, None]
        total = cdf[:, -1:]
        high = cdf.gather(-1, picked)
        low = high - flat_logp[start:start + 64].gather(-1, picked).exp().double()
        lows.append((low / total).squeeze(-1))
        highs.append((high / total).squeeze(-1))
    return torch.cat(lows).reshape(tokens.shape), torch.cat(highs).reshape(tokens.shape)


def draw_gaps(low: torch.Tensor, high: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """How far each ``u`` lies outside its token's interval ``[low, high)`` (0 inside)."""
    return torch.clamp(torch.maximum(low - u, u - high), min=0.0)
