"""The portable default engine: the HF model in the worker process, echo2's KV-cached sampler.

It samples with the computation the learner scores with (:mod:`echo2.model.sampling`), so
behaviour log-probs match the learner's to float precision; a LoRA run wraps the base model in
the run's adapter (:mod:`echo2.model.lora`), each version replaces only the adapter tensors, and
sampling runs on a :class:`~echo2.model.lora.MergedCopy` re-merged after each version. On a CUDA
device each decoding step replays a captured CUDA graph over a static KV cache
(:class:`~echo2.model.decoding.StaticDecoder`); new versions are copied into the same parameter tensors,
so the graphs stay valid across versions.
"""

from __future__ import annotations

import torch

from echo2.broadcast.integrity import CorruptPayload
from echo2.broadcast.integrity import sha256 as payload_sha256
from echo2.broadcast.payload import load_parameters
from echo2.core.lease_sizing import groups_that_fit
from echo2.model.decoding import StaticDecoder
from echo2.model.draws import Draws
from echo2.model.loading import load_model, resolve_device
from echo2.model.lora import MergedCopy, add_adapter
from echo2.model.sampling import RowFinished, Samples, WeightUpdates, prompt_logprobs, sample
from echo2.model.tokens import model_device
from echo2.protocol import RunSpec
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.bundles import BASE_SAMPLER, SamplerWeights
from echo2.rollout.engines.memory import decode_footprint, free_memory_bytes
from echo2.rollout.weights import payload_kind


class HfEngine:
    def __init__(self, spec: RunSpec, eos_id: int, pad_id: int, device: str = "cpu") -> None:
        self.spec, self.eos_id, self.pad_id = spec, eos_id, pad_id
        model = load_model(spec.model, spec.dtype)
        self.model = (add_adapter(model, spec.adapter) if spec.adapter else model).to(resolve_device(device))
        self.model.eval()
        self.kind = payload_kind(spec)
        self.merged = MergedCopy(self.model) if spec.adapter else None
        self.sampling_model = self.merged.refresh() if self.merged else self.model
        self.samplers = SamplerWeights(self.model) if spec.sampler_bundles else None
        """A training service's fleet: the sampler adapters of the bundle held (:mod:`.bundles`)."""
        self.footprint = decode_footprint(self.model)
        self.decoder = StaticDecoder() if model_device(self.model).type == "cuda" else None
        """The fast CUDA-graph path on a GPU; on a CPU the dynamic cache (no padding to a static length)."""
        self.max_context: int | None = getattr(model.config, "max_position_embeddings", None)
        """The model's window: an episode whose next turn would not fit ends (:mod:`echo2.model.episodes`)."""

    def sample(self, sampler: str, prompt_ids: list[list[int]], params: SamplingParams, draws: Draws,
               finished: RowFinished | None = None, updates: WeightUpdates | None = None) -> Samples:
        return sample(self._sampler(sampler), prompt_ids, max_new_tokens=params.max_new_tokens, eos_id=params.eos_id,
                      pad_id=self.pad_id, temperature=params.temperature, draws=draws, decoder=self.decoder,
                      finished=finished, updates=updates)

    def prompt_logprobs(self, sampler: str, prompt_ids: list[int], temperature: float) -> list[float]:
        return prompt_logprobs(self._sampler(sampler), prompt_ids, temperature)

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """As many groups as the device's free memory holds the decoding of
        (:func:`echo2.core.lease_sizing.groups_that_fit`); weights and the merged copy are already in."""
        return groups_that_fit(free_memory_bytes(model_device(self.model)), self.footprint, self.spec.group_size,
                               context_tokens, most)

    def load(self, payload: bytes, sha256: str) -> None:
        if self.samplers is not None:
            if payload_sha256(payload) != sha256:
                raise CorruptPayload("bundle payload does not match its sha256 (corrupt or truncated download)")
            self.samplers.load(payload)
            return
        load_parameters(self.model, payload, sha256, self.kind)
        if self.merged:
            self.merged.refresh()

    def _sampler(self, name: str) -> torch.nn.Module:
        """Sampler ``name`` of the bundle held; in a run's own fleet (an agent's calls), ``""`` is the
        weights of the version held."""
        if self.samplers is not None:
            return self.samplers.use(name)
        if name != BASE_SAMPLER:
            raise KeyError(f"sampler {name!r}: this worker's versions are the run's own weights (sampler '')")
        return self.sampling_model
