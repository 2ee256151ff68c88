"""Policy weights as bytes on the wire: safetensors of the model's parameters, sha256-checked.

Only parameters travel (tied weights once, via ``named_parameters``' de-duplication); buffers
such as rotary frequencies are rebuilt by the model itself. A ``kind="lora"`` payload carries
only a peft LoRA adapter's parameters (:mod:`echo2.model.lora`); the receiver's model carries the same
adapter over its own frozen base. This is the seam where the peer-assisted broadcast plugs in:
it moves these bytes, it knows nothing of training.
"""

from __future__ import annotations

from typing import Literal

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from echo2.broadcast.integrity import CorruptPayload, sha256

__all__ = ["CorruptPayload", "PAYLOAD_DTYPES", "load_parameters", "serialize_parameters", "sha256",
           "wire_parameters"]

#: Dtypes a payload may travel in (the names :class:`echo2.broadcast.manifest.Manifest` uses).
PAYLOAD_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

#: peft names every LoRA parameter ``<module>.lora_A.<adapter>.weight`` (or ``lora_B``).
ADAPTER_MARKERS = (".lora_A.", ".lora_B.")

PayloadKind = Literal["full", "lora", "bundle"]
"""``full`` weights, one LoRA adapter, or a training service's bundle of sampler adapters (:mod:`.bundle`)."""


def wire_parameters(model: torch.nn.Module, kind: PayloadKind = "full") -> dict[str, torch.nn.Parameter]:
    """The parameters a version carries: all of them (``full``), or the LoRA adapter's only (``lora``)."""
    parameters = dict(model.named_parameters())
    if kind == "full":
        return parameters
    adapter = {name: p for name, p in parameters.items() if any(mark in name for mark in ADAPTER_MARKERS)}
    if not adapter:
        raise ValueError("a 'lora' payload needs a model wrapped in a LoRA adapter (see echo2.model.lora)")
    return adapter


def serialize_parameters(model: torch.nn.Module, dtype: str | torch.dtype | None = None,
                         kind: PayloadKind = "full") -> bytes:
    """The model's parameters (``kind``, see :func:`wire_parameters`) as safetensors bytes, in the
    model's own dtype unless ``dtype`` is given.

    ``dtype="bfloat16"`` halves a float32 model's payload (floating parameters only are cast);
    :func:`load_parameters` casts back to the model's dtype, so a worker keeps running in its own
    precision and only the rounding to bf16 is lost.
    """
    target = PAYLOAD_DTYPES[dtype] if isinstance(dtype, str) else dtype
    tensors = {}
    for name, p in wire_parameters(model, kind).items():
        tensor = p.detach()
        if target is not None and tensor.is_floating_point():
            tensor = tensor.to(target)
        tensors[name] = tensor.contiguous()
    return save_tensors(tensors)


@torch.no_grad()
def load_parameters(model: torch.nn.Module, payload: bytes, expected_sha256: str | None = None,
                    kind: PayloadKind = "full") -> None:
    """Copy ``payload`` (parameters of ``kind``) into ``model`` in place, after checking its hash and
    its tensor names/shapes.

    A payload in another dtype (e.g. bf16 from ``serialize_parameters(model, "bfloat16")``) is cast
    to each parameter's dtype by the copy.
    """
    if expected_sha256 is not None and sha256(payload) != expected_sha256:
        raise CorruptPayload("weights payload does not match its sha256 (corrupt or truncated download)")
    try:
        tensors = load_tensors(payload)
    except Exception as error:  # safetensors raises its own error types for malformed headers
        raise CorruptPayload(f"weights payload is not valid safetensors ({error})") from None
    parameters = wire_parameters(model, kind)
    if set(tensors) != set(parameters):
        missing, extra = sorted(set(parameters) - set(tensors)), sorted(set(tensors) - set(parameters))
        raise CorruptPayload(f"weights do not fit the model (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, tensor in tensors.items():
        if tensor.shape != parameters[name].shape:
            raise CorruptPayload(f"{name}: shape {tuple(tensor.shape)} != model's {tuple(parameters[name].shape)}")
        parameters[name].copy_(tensor)
