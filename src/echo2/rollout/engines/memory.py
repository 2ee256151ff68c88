"""What a worker's device has free, and what one row of decoding takes on it (the inputs of
:func:`echo2.core.lease_sizing.groups_that_fit`)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel

from echo2.core.lease_sizing import DecodeFootprint


def free_memory_bytes(device: torch.device) -> int:
    """Free memory now: the CUDA device's (``cudaMemGetInfo``), else the host's available RAM
    (``MemAvailable``: free plus what the kernel can reclaim, as a new allocation would get it)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read the host's available memory from /proc/meminfo (MemAvailable)")


def decode_footprint(model: PreTrainedModel) -> DecodeFootprint:
    """KV bytes per token and vocabulary of ``model`` (a decoder-only transformer's config)."""
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = next(model.parameters()).element_size()
    return DecodeFootprint(kv_bytes_per_token=2 * config.num_hidden_layers * kv_heads * head_dim * element,
                           vocab_size=config.vocab_size)
