"""Master weights and compute precision on the learner.

Why: AdamW applied to bf16 parameters rounds away every update smaller than half a bf16 step
(bf16 keeps 8 significant bits: a weight of 0.03 moves in steps of ~1.2e-4), so at the learning
rates RL fine-tuning uses (1e-6 .. 1e-5) a bf16 model never changes. The learner therefore keeps
the parameters it trains in ``learner.master_dtype`` (float32) and runs forward and backward under
``torch.autocast`` in ``model.dtype`` — mixed-precision training with fp32 master weights
(Micikevicius et al. 2018, arXiv 1710.03740) in its "fp32 parameters + autocast" form, which is
what FSDP's ``MixedPrecisionPolicy`` and most RL trainers do.

Frozen parameters (the base model of a LoRA run) stay in ``model.dtype``: they never change, and
keeping them narrow halves their memory and spares autocast re-casting them at every forward.
With ``model.dtype: float32`` (the default) there is no autocast at all.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from echo2.model.loading import DTYPES


def hold_master_weights(model: torch.nn.Module, master_dtype: str) -> torch.nn.Module:
    """Cast every trainable floating-point parameter of ``model`` to ``master_dtype`` in place."""
    dtype = DTYPES[master_dtype]
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.is_floating_point() and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)
    return model


class ComputePrecision:
    """The context the learner computes in: autocast to ``compute_dtype`` unless that is float32."""

    def __init__(self, compute_dtype: str = "float32", device_type: str = "cpu") -> None:
        self.dtype = DTYPES[compute_dtype]
        self.device_type = device_type

    def __call__(self) -> AbstractContextManager:
        if self.dtype == torch.float32:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
