"""Policy weights as bytes on the wire: safetensors of the model's parameters, sha256-checked.

Only parameters travel (tied weights once, via ``named_parameters``' de-duplication); buffers
such as rotary frequencies are rebuilt by the model itself. This is the seam where the
peer-assisted broadcast plugs in: it moves these bytes, it knows nothing of training.
"""

from __future__ import annotations

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from echo2.broadcast.integrity import CorruptPayload, sha256

__all__ = ["CorruptPayload", "PAYLOAD_DTYPES", "load_parameters", "serialize_parameters", "sha256"]

#: Dtypes a payload may travel in (the names :class:`echo2.broadcast.manifest.Manifest` uses).
PAYLOAD_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def serialize_parameters(model: torch.nn.Module, dtype: str | torch.dtype | None = None) -> bytes:
    """The model's parameters as safetensors bytes, in the model's own dtype unless ``dtype`` is given.

    ``dtype="bfloat16"`` halves a float32 model's payload (floating parameters only are cast);
    :func:`load_parameters` casts back to the model's dtype, so a worker keeps running in its own
    precision and only the rounding to bf16 is lost.
    """
    target = PAYLOAD_DTYPES[dtype] if isinstance(dtype, str) else dtype
    tensors = {}
    for name, p in model.named_parameters():
        tensor = p.detach()
        if target is not None and tensor.is_floating_point():
            tensor = tensor.to(target)
        tensors[name] = tensor.contiguous()
    return save_tensors(tensors)


@torch.no_grad()
def load_parameters(model: torch.nn.Module, payload: bytes, expected_sha256: str | None = None) -> None:
    """Copy ``payload`` into ``model`` in place, after checking its hash and its tensor names/shapes.

    A payload in another dtype (e.g. bf16 from ``serialize_parameters(model, "bfloat16")``) is cast
    to each parameter's dtype by the copy.
    """
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
