"""A worker's sampler adapters (``echo2 serve``): the bundle it holds, merged into its model one at a time.

Each version of a training service's fleet is a bundle of LoRA samplers
(:mod:`echo2.broadcast.bundle`). Sampling with an unmerged adapter costs about twice as much per
token on a CPU as with plain weights (:mod:`echo2.model.lora`), so the worker keeps one plain
model and merges the sampler a request names into it, ``W = W_base + (alpha / r) B A`` per
adapted module, from the base weights it keeps aside (never from the previous merge: no rounding
accumulates). Requests of one sampler in a row cost one merge; the base model's own sampler is
``""``. A model whose unembedding shares the embedding's tensor gets its own copy of it first, so
that merging an adapter into the unembedding leaves the embedding as it was (as peft's adapter
on the unembedding does).
"""

from __future__ import annotations

import torch

from echo2.broadcast.bundle import SamplerAdapter, read_bundle
from echo2.broadcast.integrity import CorruptPayload

#: The base model's own sampler (no adapter).
BASE_SAMPLER = ""


class SamplerWeights:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        output, embedding = model.get_output_embeddings(), model.get_input_embeddings()
        if output is not None and output.weight is embedding.weight:
            output.weight = torch.nn.Parameter(embedding.weight.detach().clone(), requires_grad=False)
        self.samplers: dict[str, SamplerAdapter] = {}
        self._base: dict[str, torch.Tensor] = {}
        """Module name -> its base weight, for every module a merge changed."""
        self._merged: str | None = BASE_SAMPLER

    def load(self, payload: bytes) -> None:
        """Hold the samplers of a verified bundle payload."""
        self.hold(read_bundle(payload))

    def hold(self, samplers: dict[str, SamplerAdapter]) -> None:
        """Hold ``samplers`` (each checked against the model's modules) beside the base model's own."""
        for name, sampler in samplers.items():
            for module, (a, b) in sampler.modules().items():
                try:
                    layer = self.model.get_submodule(module)
                except AttributeError:
                    raise CorruptPayload(f"sampler {name!r} adapts {module!r}, which this model lacks") from None
                out_features, in_features = layer.weight.shape
                if a.shape != (sampler.rank, in_features) or b.shape != (out_features, sampler.rank):
                    raise CorruptPayload(f"sampler {name!r}: {module} adapter shapes {tuple(a.shape)}, "
                                         f"{tuple(b.shape)} do not fit its {tuple(layer.weight.shape)} weight")
        self.samplers = {BASE_SAMPLER: SamplerAdapter(1, 1.0, {}), **samplers}
        self._merged = None  # a sampler of the same name in a new bundle is merged again

    @torch.no_grad()
    def use(self, name: str) -> torch.nn.Module:
        """The model with sampler ``name`` merged in (KeyError: the bundle held does not carry it)."""
        sampler = self.samplers[name]
        if self._merged == name:
            return self.model
        for module, weight in self._base.items():
            self.model.get_submodule(module).weight.copy_(weight)
        for module, (a, b) in sampler.modules().items():
            weight = self.model.get_submodule(module).weight
            base = self._base.setdefault(module, weight.detach().clone())
            weight.copy_(base.float() + sampler.scale * (b.float() @ a.float()))
        self._merged = name
        return self.model
