"""Policy weights as bytes on the wire: safetensors of the model's parameters, sha256-checked.

Only parameters travel (tied weights once, via ``named_parameters``' de-duplication); buffers
such as rotary frequencies are rebuilt by the model itself. This is the seam where the
peer-assisted broadcast plugs in: it moves these bytes, it knows nothing of training.
"""

from __future__ import annotations

import hashlib

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors


class CorruptPayload(ValueError):
    """Weights bytes that fail their checksum or do not fit the model."""


def serialize_parameters(model: torch.nn.Module) -> bytes:
    return save_tensors({name: p.detach().contiguous() for name, p in model.named_parameters()})


def sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


@torch.no_grad()
def load_parameters(model: torch.nn.Module, payload: bytes, expected_sha256: str | None = None) -> None:
    """Copy ``payload`` into ``model`` in place, after checking its hash and its tensor names/shapes."""
    if expected_sha256 is not None and sha256(payload) != expected_sha256:
        raise CorruptPayload("weights payload does not match its sha256 (corrupt or truncated download)")
    try:
        tensors = load_tensors(payload)
    except Exception as error:  # safetensors raises its own error types for malformed headers
        raise CorruptPayload(f"weights payload is not valid safetensors ({error})") from None
    parameters = dict(model.named_parameters())
    if set(tensors) != set(parameters):
        missing, extra = sorted(set(parameters) - set(tensors)), sorted(set(tensors) - set(parameters))
        raise CorruptPayload(f"weights do not fit the model (missing {missing[:3]}, unexpected {extra[:3]})")
    for name, tensor in tensors.items():
        if tensor.shape != parameters[name].shape:
            raise CorruptPayload(f"{name}: shape {tuple(tensor.shape)} != model's {tuple(parameters[name].shape)}")
        parameters[name].copy_(tensor)
