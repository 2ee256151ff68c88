"""Continuous batching over an HF causal LM: rows admitted and retired between decoding steps.

Why: a static batch decodes until its longest row ends, so the tail of a long-tailed task is paid
at one-row speed (a decoding step of the hf engine costs ``a + b x rows`` with ``a`` dominant on a
CPU: one row left of 32 costs half of what all 32 cost). Inference engines (vLLM, SGLang,
llama.cpp's server) refill a finished row's slot at once; ECHO-2's workers are such engines
(Parallax), and PipelineRL, AReaL and prime-rl stream rollouts the same way.

The batch keeps one KV cache for its running rows, left-aligned as :func:`echo2.model.tokens.prefill`
lays a batch out (positions counted from each row's first real token, padding masked), so a row's
logits do not depend on which other rows share its steps. A step first chooses every running row's
next token by the one rule (:class:`~echo2.model.decoding.Choice`, each row's uniform from its own
draw key at its own position: :mod:`echo2.model.draws`), then retires the rows that ended (EOS or
their token budget) and only then runs the model on the rest: a finished row costs no forward.
Admitted rows are prefilled together (a group's shared prompt once) and joined to the running
cache, the shorter side left-padded. Every token records the version of the weights whose forward
gave its logits (:attr:`Row.versions`): weights may change between two steps (an in-flight update).
After a change the caller recomputes the running rows' cache under the new weights
(:meth:`ContinuousBatch.recompute`: one prefill of every running row's context), so each token's
log-prob is exactly what the new version gives its whole sequence — what the learner's audit
replays. PipelineRL keeps the old cache instead; kept, a token after the switch differed from the
new version's replay by 1.15 nats/token on the audit test's update (``tests/unit/learner/
test_verification.py``), which no audit tolerance can tell from a lie.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from echo2.model.decoding import Choice
from echo2.model.draws import uniform
from echo2.model.tokens import prefill

#: Leading columns that every running row masks out, past which a retirement trims them (a trim
#: copies the whole cache: done only once they are a quarter of its width or more).
TRIM_SHARE = 0.25


@dataclass
class Row:
    """One sequence of a :class:`ContinuousBatch`: its prompt, its draw key and what it sampled."""

    key: Hashable
    """The caller's name for the row (a lease's slot and sample index, a request's)."""
    prompt_ids: list[int]
    draw_key: tuple[int, int] | None
    """(seed, row): its token at position ``p`` is drawn at ``uniform(seed, row, draw_offset + p)``
    (None: a greedy batch's row, which draws nothing)."""
    max_new_tokens: int
    draw_offset: int = 0
    """Model tokens the row's episode sampled before this prompt (an episode's earlier turns)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The version of the weights whose forward gave each token's logits."""


class ContinuousBatch:
    """Rows decoded together, each admitted when the caller has a slot for it and retired when it ends."""

    def __init__(self, model: torch.nn.Module, *, temperature: float, eos_id: int, pad_id: int,
                 greedy: bool = False, share_prompts: bool = True) -> None:
        """``greedy``: the argmax token (log-probs still under ``softmax(logits / temperature)``);
        ``share_prompts=False``: every row's prompt prefilled on its own (benchmarks' baseline)."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model, self.pad_id, self.share_prompts = model, pad_id, share_prompts
        self.choice = Choice(temperature=temperature, greedy=greedy, eos_id=eos_id, pad_id=pad_id)
        self.rows: list[Row] = []
        self._cache: DynamicCache | None = None
        self._mask = self._position = self._logits = None
        self._logit_versions: list[int] = []
        """Per running row, the version of the forward its next logits came from."""

    def __len__(self) -> int:
        return len(self.rows)

    @torch.no_grad()
    def admit(self, rows: list[Row], version: int = 0) -> None:
        """Prefill ``rows``' prompts (each distinct prompt once) under the weights ``version`` held
        now and join them to the running rows."""
        if not rows:
            return
        for row in rows:
            if row.max_new_tokens < 1:
                raise ValueError(f"row {row.key!r}: max_new_tokens must be >= 1, got {row.max_new_tokens}")
            if row.draw_key is None and not self.choice.greedy:
                raise ValueError(f"row {row.key!r} has no draw key: only a greedy batch draws nothing")
        start = prefill(self.model, [row.prompt_ids for row in rows], self.pad_id, share=self.share_prompts)
        if self._cache is None:
            self._cache, self._mask = start.cache, start.attention_mask
            self._position, self._logits = start.next_position, start.next_logits
        else:
            width = max(self._mask.shape[1], start.attention_mask.shape[1])
            self._cache = _joined(self._cache, start.cache, width)
            self._mask = torch.cat([_pad_left(self._mask, width), _pad_left(start.attention_mask, width)])
            self._position = torch.cat([self._position, start.next_position])
            self._logits = torch.cat([self._logits, start.next_logits])
        self.rows += rows
        self._logit_versions += [version] * len(rows)

    @torch.no_grad()
    def step(self, version: int) -> list[Row]:
        """One token for every running row (from the logits of its last forward, tagged with that
        forward's version); returns the rows that ended with it (removed from the batch), the others
        run through the model for their next, under the weights ``version`` held now."""
        if not self.rows:
            return []
        device = self._logits.device
        uniforms = torch.tensor([0.0 if row.draw_key is None else
                                 uniform(*row.draw_key, row.draw_offset + len(row.token_ids)) for row in self.rows],
                                dtype=torch.float64, device=device)
        running = torch.zeros(len(self.rows), dtype=torch.bool, device=device)
        tokens, logprobs, ended = self.choice(self._logits, uniforms, running)
        for row, token, logprob, chosen_by in zip(self.rows, tokens.tolist(), logprobs.tolist(), self._logit_versions):
            row.token_ids.append(token)
            row.logprobs.append(logprob)
            row.versions.append(chosen_by)
        done = [bool(end) or len(row.token_ids) >= row.max_new_tokens for row, end in zip(self.rows, ended.tolist())]
        finished = [row for row, end in zip(self.rows, done) if end]
        if finished:
            keep = torch.tensor([not end for end in done], device=device)
            self._retire(keep)
            tokens = tokens[keep]
        if self.rows:
            self._mask = torch.cat([self._mask, self._mask.new_ones((self._mask.shape[0], 1))], dim=1)
            output = self.model(input_ids=tokens[:, None], attention_mask=self._mask,
                                position_ids=self._position[:, None], past_key_values=self._cache, use_cache=True)
            self._cache, self._position, self._logits = output.past_key_values, self._position + 1, output.logits[:, -1]
            self._logit_versions = [version] * len(self.rows)
        return finished

    @torch.no_grad()
    def recompute(self, version: int) -> None:
        """The weights changed to ``version``: rebuild the running rows' cache and next logits
        from their contexts (prompt and tokens so far) under them."""
        if not self.rows:
            return
        start = prefill(self.model, [row.prompt_ids + row.token_ids for row in self.rows], self.pad_id, share=False)
        self._cache, self._mask = start.cache, start.attention_mask
        self._position, self._logits = start.next_position, start.next_logits
        self._logit_versions = [version] * len(self.rows)

    def _retire(self, keep: torch.Tensor) -> None:
        kept_rows = keep.tolist()
        self.rows = [row for row, kept in zip(self.rows, kept_rows) if kept]
        self._logit_versions = [v for v, kept in zip(self._logit_versions, kept_rows) if kept]
        if not self.rows:
            self._cache = self._mask = self._position = self._logits = None
            return
        indices = keep.nonzero().squeeze(-1)
        self._mask, self._position, self._logits = self._mask[indices], self._position[indices], self._logits[indices]
        masked = int((self._mask.sum(0) == 0).long().cumprod(0).sum())  # leading columns no running row attends
        if masked and masked >= TRIM_SHARE * self._mask.shape[1]:
            self._cache = _rebuilt(self._cache, lambda tensor: tensor[indices, :, masked:])
            self._mask = self._mask[:, masked:]
        else:
            self._cache.batch_select_indices(indices)


def _layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _rebuilt(cache: DynamicCache, change) -> DynamicCache:
    return DynamicCache(ddp_cache_data=[(change(keys), change(values)) for keys, values in _layers(cache)])


def _pad_left(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` [rows, length, ...] or a cache's [rows, heads, length, dim] widened to ``width``
    on the left with zeros (masked columns)."""
    missing = width - tensor.shape[-1 if tensor.dim() == 2 else 2]
    if missing == 0:
        return tensor
    if tensor.dim() == 2:
        return torch.cat([tensor.new_zeros((tensor.shape[0], missing)), tensor], dim=1)
    rows, heads, _, dim = tensor.shape
    return torch.cat([tensor.new_zeros((rows, heads, missing, dim)), tensor], dim=2)


def _joined(running: DynamicCache, admitted: DynamicCache, width: int) -> DynamicCache:
    """The running rows' cache and the admitted rows' stacked, both left-padded to ``width``."""
    return DynamicCache(ddp_cache_data=[
        (torch.cat([_pad_left(k1, width), _pad_left(k2, width)]), torch.cat([_pad_left(v1, width), _pad_left(v2, width)]))
        for (k1, v1), (k2, v2) in zip(_layers(running), _layers(admitted), strict=True)])
