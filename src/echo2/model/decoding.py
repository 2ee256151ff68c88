"""How :func:`echo2.model.sampling.sample` runs the model once per new token on a fixed batch, and
the one rule both of its paths choose tokens by (:class:`Choice`).

* The default path is :class:`echo2.model.continuous.ContinuousBatch`: HF's growing ``DynamicCache``
  and a 2-D mask one column longer each step, each row retired when it ends. Nothing is allocated
  ahead and attention spans only the tokens so far — the cheapest on a CPU.
* :class:`StaticDecoder` (the fast path on CUDA): the KV cache, the mask and the step's inputs live in
  buffers allocated once per (rows, cache length) shape, so every decoding step launches the very same
  kernels on the very same addresses and can be **captured once as a CUDA graph and replayed**
  (``torch.cuda.CUDAGraph``). A 135M model's step is ~450 small kernels; launched one by one from
  Python they leave an H200 idle most of the step (~25 ms/token measured, docs/real-model.md), replayed
  as one graph they do not. On a CPU it runs the same buffers eagerly (``graphs=False``), which is
  how the tests check it against the default path.

Both decode from the same :func:`echo2.model.tokens.prefill` (each group's shared prompt run once) and feed
the model the same position ids, so their logits agree to float rounding: the static mask only adds
slots whose attention weight is exactly zero. A static step attends with :func:`grouped_decode_attention`
(each key/value head read once for the query heads that share it) instead of the model's own
attention, which repeats a grouped-query model's key/value heads over the whole cache every step and
layer (transformers' SDPA path whenever a mask is given: SmolLM2's 3 key/value heads copied to 9, the
largest share of a 256-row step on an H200, docs/real-model.md). The sampling itself (temperature, RNG, log-probs) stays
in :mod:`echo2.model.sampling`, outside the graph, with the numerics the learner scores with.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, Cache
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from echo2.model.draws import inverse_cdf
from echo2.model.tokens import Prefill

log = logging.getLogger(__name__)

CACHE_BUCKET = 64
"""Static cache lengths are rounded up to a multiple of this, so prompts of nearby widths share one
captured graph (attention over a few masked slots costs less than capturing another graph)."""
GRAPHS_KEPT = 2
"""Captured shapes a :class:`StaticDecoder` keeps (each holds its KV cache: rows x length x layers)."""
SUPPORTED_ATTENTION = ("sdpa", "eager")
GROUPED_ATTENTION = "echo2_grouped_decode"
"""The name :func:`grouped_decode_attention` is registered under with transformers' attention registry."""


def grouped_decode_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             **kwargs: object) -> tuple[torch.Tensor, None]:
    """One new token's attention with the query heads grouped onto the key/value head they share.

    Query head ``h`` reads key/value head ``h // groups`` (the order of transformers' ``repeat_kv``), so
    ``query`` [rows, heads, 1, dim] is viewed as [rows, kv_heads, groups, dim]: one attention call over
    the cache as stored, each group's queries standing in for the single query position. The boolean
    ``attention_mask`` [rows, 1, 1, length] broadcasts over heads and groups. Returns transformers'
    layout, [rows, 1, heads, dim].
    """
    rows, heads, new, dim = query.shape
    if new != 1:
        raise ValueError(f"grouped decode attention takes one new token per row, got {new}")
    kv_heads = key.shape[1]
    packed = query.reshape(rows, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling)
    return out.reshape(rows, heads, 1, dim).transpose(1, 2), None


AttentionInterface.register(GROUPED_ATTENTION, grouped_decode_attention)
AttentionMaskInterface.register(GROUPED_ATTENTION, sdpa_mask)  # never built: the static step passes a 4-D mask


@dataclass(frozen=True)
class Choice:
    """How every row's next token is chosen from its logits: the one sampling rule of both decoders
    (the static one captures it inside its graph)."""

    temperature: float
    greedy: bool
    eos_id: int
    pad_id: int

    def __call__(self, logits: torch.Tensor, uniforms: torch.Tensor,
                 finished: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(token, its log-prob under ``softmax(logits / T)``, finished after it) for every row.

        Sampling is the inverse CDF at each row's uniform, put into ``uniforms`` by the caller
        (:mod:`echo2.model.draws`: the verifiable rule, the same draws on any device), so that no
        random-number call sits inside a captured graph. A finished row emits ``pad_id``.
        """
        logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        token = logp.argmax(dim=-1) if self.greedy else inverse_cdf(logp, uniforms)
        token = torch.where(finished, self.pad_id, token)
        return token, logp.gather(-1, token[:, None]).squeeze(-1), finished | (token == self.eos_id)


class DecodeSession(Protocol):
    """One call of :func:`~echo2.model.sampling.sample`: a token per row per step, from the prefill on."""

    uniforms: torch.Tensor
    """[rows] float64: the caller puts each row's draw in it before each sampled step."""
    finished: torch.Tensor
    """[rows] bool: which rows have emitted EOS."""
    check_every: int
    """How many steps between checks that every row has finished (each check waits for the device)."""

    def step(self, last: bool) -> None:
        """Choose every row's next token; unless ``last``, run it through the model."""

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[rows, steps] tokens and their log-probs."""


class Decoder(Protocol):
    def begin(self, model: torch.nn.Module, start: Prefill, max_new_tokens: int, choice: Choice) -> DecodeSession:
        """A session that continues from ``start`` for up to ``max_new_tokens`` tokens."""


def _uniforms_for(logits: torch.Tensor) -> torch.Tensor:
    return torch.zeros(logits.shape[0], dtype=torch.float64, device=logits.device)


class SlotCache(Cache):
    """A KV cache of fixed-size buffers written at one slot per step.

    The slot is a one-element device tensor advanced in place, so the model's cache writes
    (``index_copy_`` at ``slot``) read it from the device inside a replayed graph instead of baking
    in the position the graph was captured at; every layer returns its whole buffer and the 4-D mask
    says which slots are real.
    """

    is_compileable = True

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], slot: torch.Tensor) -> None:
        super().__init__(layers=[])
        self.keys, self.values, self.slot = keys, values, slot

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx].index_copy_(2, self.slot, key_states)
        self.values[layer_idx].index_copy_(2, self.slot, value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]


@dataclass
class _Buffers:
    """Everything one decoding step reads and writes, allocated once for a (rows, length) shape: the
    graph replays against these addresses."""

    cache: SlotCache
    logits: torch.Tensor  # [rows, vocab] the logits the next token is chosen from
    uniforms: torch.Tensor  # [rows] float64 draws (echo2.model.draws), filled by the caller each step
    finished: torch.Tensor  # [rows] bool
    token: torch.Tensor  # [rows, 1] the chosen token, the model's next input
    position: torch.Tensor  # [rows, 1] its position id
    visible: torch.Tensor  # [rows, 1, 1, length] bool: which cache slots each row attends to
    step: torch.Tensor  # [1] long: the output column this step writes
    tokens: torch.Tensor  # [rows, length] chosen tokens, column by column
    logprobs: torch.Tensor  # [rows, length] their log-probs
    graph: torch.cuda.CUDAGraph | None = None


@contextmanager
def _attending_grouped(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` with :func:`grouped_decode_attention` for the duration (a static step only: a
    replayed graph holds the kernels it was captured with, so this costs nothing per replay)."""
    config = model.config
    own = config._attn_implementation
    config._attn_implementation = GROUPED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = own


def _layer_kv(cache: Cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values) of a filled ``DynamicCache``."""
    return [(layer.keys, layer.values) for layer in cache.layers]


class _StaticSession:
    check_every = 16
    """Checking for all-finished rows waits for the device; a few steps past the last EOS are cheaper."""

    def __init__(self, model: torch.nn.Module, buffers: _Buffers, start: Prefill, choice: Choice) -> None:
        self.model, self.buffers, self.start, self.choice = model, buffers, start, choice
        self.uniforms, self.finished = buffers.uniforms, buffers.finished
        self.steps = 0
        self.reset()

    def reset(self) -> None:
        """Load the prefill into the buffers (again after a graph's warm-up steps)."""
        b, start = self.buffers, self.start
        width = start.attention_mask.shape[1]
        b.visible.zero_()
        b.visible[:, 0, 0, :width] = start.attention_mask.bool()
        b.position.copy_(start.next_position[:, None])
        b.cache.slot.fill_(width)
        b.step.zero_()
        b.finished.zero_()
        b.logits.copy_(start.next_logits)
        for (keys, values), (k, v) in zip(_layer_kv(start.cache), zip(b.cache.keys, b.cache.values)):
            k[:, :, :width].copy_(keys)
            v[:, :, :width].copy_(values)

    def run(self) -> None:
        """One whole step on the buffers (what a graph captures): choose, record, run the model, advance."""
        b = self.buffers
        token, logprob, finished = self.choice(b.logits, b.uniforms, b.finished)
        b.finished.copy_(finished)
        b.tokens.index_copy_(1, b.step, token[:, None])
        b.logprobs.index_copy_(1, b.step, logprob[:, None])
        b.token.copy_(token[:, None])
        b.visible.index_fill_(3, b.cache.slot, True)
        with _attending_grouped(self.model):
            output = self.model(input_ids=b.token, attention_mask=b.visible, position_ids=b.position,
                                past_key_values=b.cache, use_cache=True)
        b.logits.copy_(output.logits[:, -1, :])
        b.position.add_(1)
        b.cache.slot.add_(1)
        b.step.add_(1)

    def step(self, last: bool) -> None:
        """The last step runs the model as well: one spare forward keeps a single graph per shape."""
        if self.buffers.graph is None:
            self.run()
        else:
            self.buffers.graph.replay()
        self.steps += 1

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.buffers.tokens[:, : self.steps], self.buffers.logprobs[:, : self.steps]


class StaticDecoder:
    """Preallocated KV cache; with ``graphs`` each step replays a CUDA graph captured once per shape.

    Keep one per model (a rollout engine does): captured graphs hold the model's parameter
    addresses, which stay valid because new versions are copied into the parameters in place
    (:func:`echo2.broadcast.payload.load_parameters`, :meth:`echo2.model.lora.MergedCopy.refresh`).
    """

    def __init__(self, graphs: bool = True) -> None:
        self.graphs = graphs
        self._shapes: OrderedDict[tuple[int, int, int], _Buffers] = OrderedDict()

    def begin(self, model: torch.nn.Module, start: Prefill, max_new_tokens: int, choice: Choice) -> DecodeSession:
        attention = getattr(model.config, "_attn_implementation", "sdpa")
        if attention not in SUPPORTED_ATTENTION:
            raise ValueError(f"static decoding needs attention {SUPPORTED_ATTENTION}, the model uses {attention!r}: "
                             "sample without a decoder (the default continuous batch)")
        rows, width = start.attention_mask.shape
        length = -(-(width + max_new_tokens) // CACHE_BUCKET) * CACHE_BUCKET
        buffers = self._buffers(model, start, rows, length, choice)
        session = _StaticSession(model, buffers, start, choice)
        if self.graphs and buffers.graph is None and start.next_logits.device.type == "cuda":
            try:
                self._capture(session)
            except RuntimeError as error:  # an op the graph cannot hold: decode eagerly from now on
                log.warning("CUDA graph capture failed (%s); decoding without graphs", str(error)[:300])
                self.graphs, buffers.graph = False, None
            session.reset()
        return session

    def _buffers(self, model: torch.nn.Module, start: Prefill, rows: int, length: int, choice: Choice) -> _Buffers:
        key = (id(model), rows, length, choice)
        if key in self._shapes:
            self._shapes.move_to_end(key)
            return self._shapes[key]
        while len(self._shapes) >= GRAPHS_KEPT:
            self._shapes.popitem(last=False)
        layers = _layer_kv(start.cache)
        logits = start.next_logits
        device = logits.device

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        buffers = _Buffers(
            cache=SlotCache([k.new_zeros((rows, k.shape[1], length, k.shape[3])) for k, _ in layers],
                            [v.new_zeros((rows, v.shape[1], length, v.shape[3])) for _, v in layers], zeros(1)),
            logits=torch.zeros_like(logits), uniforms=_uniforms_for(logits), finished=zeros(rows, dtype=torch.bool),
            token=zeros(rows, 1), position=zeros(rows, 1), visible=zeros(rows, 1, 1, length, dtype=torch.bool),
            step=zeros(1), tokens=zeros(rows, length), logprobs=zeros(rows, length, dtype=torch.float32))
        self._shapes[key] = buffers
        return buffers

    @staticmethod
    def _capture(session: _StaticSession) -> None:
        """Warm the step up on a side stream (lazy CUDA state, cuBLAS workspaces), then capture it;
        the caller resets the buffers the warm-up steps moved on."""
        b = session.buffers
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                session.run()
        torch.cuda.current_stream().wait_stream(stream)
        b.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(b.graph):
            session.run()
