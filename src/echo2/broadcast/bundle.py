"""A training service's version: every sampler adapter its clients may sample from, in one payload.

``echo2 serve`` trains many LoRA adapters on one base model (one per training client) and each
``save_weights_for_sampler`` makes an immutable sampler of one of them. A version of the service's
fleet is the set of samplers its clients still sample from: one safetensors payload whose tensors
are named ``<sampler>/<peft name>`` and whose metadata gives each sampler's rank and alpha. It
travels like any version (chunked, hashed, relayed), and a worker rebuilds each sampler's merged
weights from it (:class:`~echo2.rollout.engines.bundles.SamplerWeights`).

Consecutive bundles rarely have one layout: each ``save_weights_for_sampler`` adds a sampler and
idle ones leave. So a bundle travels as a delta against the one before *rebased*
(:func:`bundle_copies`, :mod:`echo2.broadcast.delta`): every sampler it kept against its own bytes
(nothing to send), a new one against its predecessor — the sampler its training client published
before, one optimizer step away — and only what changed crosses the network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from echo2.broadcast.integrity import CorruptPayload
from echo2.broadcast.payload import ADAPTER_MARKERS

#: The safetensors metadata key of a bundle's sampler table.
BUNDLE_KEY = "echo2_samplers"
#: The prefix peft gives a LoRA model's parameter names (stripped: a bundle names base-model modules).
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class SamplerAdapter:
    """One sampler: a LoRA adapter (peft's ``lora_A`` / ``lora_B`` per adapted module) and its scale."""

    rank: int
    alpha: float
    tensors: Mapping[str, torch.Tensor]
    """Base-model module name + ``.lora_A.weight`` / ``.lora_B.weight`` -> tensor (a base-model
    sampler, ``""``, has none)."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def modules(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Adapted module name -> its (A, B)."""
        names = {key.rsplit(".lora_", 1)[0] for key in self.tensors}
        return {name: (self.tensors[f"{name}.lora_A.weight"], self.tensors[f"{name}.lora_B.weight"])
                for name in sorted(names)}


def peft_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The LoRA matrices of peft's adapter state dict (``get_peft_model_state_dict``, or a saved
    adapter file) named by base-model module; what else peft saves beside them (a copy of a tied
    unembedding's base weight) is the base model's, which every worker has."""
    return {key.removeprefix(PEFT_PREFIX): tensor.detach().to("cpu", copy=True).contiguous()  # a snapshot, not a view
            for key, tensor in state.items() if any(marker in key for marker in ADAPTER_MARKERS)}


def bundle_payload(samplers: Mapping[str, SamplerAdapter], dtype: torch.dtype | None = None) -> bytes:
    """The payload of a version holding ``samplers`` (in name order: the same samplers give the same
    layout, so a version's delta from the one before applies)."""
    table, tensors = {}, {}
    for name in sorted(samplers):
        if "/" in name:
            raise ValueError(f"sampler name {name!r} contains '/'")
        sampler = samplers[name]
        table[name] = {"rank": sampler.rank, "alpha": sampler.alpha}
        for key in sorted(sampler.tensors):
            tensor = sampler.tensors[key]
            tensors[f"{name}/{key}"] = (tensor.to(dtype) if dtype is not None else tensor).contiguous()
    return save_tensors(tensors, metadata={BUNDLE_KEY: json.dumps(table)})


def read_bundle(payload: bytes) -> dict[str, SamplerAdapter]:
    """The samplers of a bundle payload (its hash already checked by the fetch)."""
    try:
        tensors = load_tensors(payload)
        header_size = int.from_bytes(payload[:8], "little")  # safetensors: an 8-byte length, then the JSON header
        table = json.loads(json.loads(payload[8 : 8 + header_size])["__metadata__"][BUNDLE_KEY])
    except Exception as error:  # a malformed header (safetensors raises its own error types) or no sampler table
        raise CorruptPayload(f"not a sampler bundle ({type(error).__name__}: {error})") from None
    samplers = {}
    for name, shape in table.items():
        prefix = f"{name}/"
        own = {key[len(prefix):]: t for key, t in tensors.items() if key.startswith(prefix)}
        samplers[name] = SamplerAdapter(rank=int(shape["rank"]), alpha=float(shape["alpha"]), tensors=own)
        try:
            samplers[name].modules()
        except KeyError as missing:
            raise CorruptPayload(f"sampler {name!r}: {missing} is missing its pair") from None
    if unclaimed := [key for key in tensors if key.split("/", 1)[0] not in table]:
        raise CorruptPayload(f"tensors of no sampler in the bundle: {unclaimed[:3]}")
    return samplers


def _layout(payload: bytes) -> tuple[int, dict[str, dict]]:
    """Where a safetensors payload's tensor bytes start, and its tensors' dtype, shape and offsets."""
    size = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8 : 8 + size])
    header.pop("__metadata__", None)
    return 8 + size, header


def bundle_copies(previous: bytes, new: bytes, predecessors: Mapping[str, str]) -> list[tuple[int, int, int]]:
    """The runs of ``previous`` that rebase it to ``new``'s layout (:func:`echo2.broadcast.delta.rebased`):
    each tensor of a sampler of ``new`` over the same tensor of its predecessor in ``previous``
    (``predecessors``: new sampler -> a sampler of ``previous``; itself when kept), where both have
    it in the same dtype and shape. Empty: nothing of ``previous`` helps."""
    old_start, old_tensors = _layout(previous)
    new_start, new_tensors = _layout(new)
    copies = []
    for name, tensor in new_tensors.items():
        sampler, _, key = name.partition("/")
        source = old_tensors.get(f"{predecessors.get(sampler, '')}/{key}")
        if source is None or (source["dtype"], source["shape"]) != (tensor["dtype"], tensor["shape"]):
            continue
        begin, end = tensor["data_offsets"]
        copies.append((new_start + begin, old_start + source["data_offsets"][0], end - begin))
    return copies
