"""The optimizer update: the one place gradients accumulated by a loss become new weights.

Two drivers call it: echo2's own step (:meth:`echo2.learner.trainer.Learner.train_step`, once per
minibatch, at the config's AdamW settings) and the training service's ``optim_step``
(:mod:`echo2.service.training`, at the AdamW settings each request carries). Both clip the
global gradient norm and refuse a non-finite update the same way, so a client's training loop
and echo2's own cannot differ in what an update is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from echo2.learner.distributed import Shard


@dataclass(frozen=True)
class AdamSettings:
    """What one AdamW update uses (Loshchilov & Hutter 2019, arXiv 1711.05101)."""

    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    grad_clip: float | None
    """Global L2 norm the gradients are clipped to; None: not clipped (the norm is still measured)."""


def set_adam(optimizer: torch.optim.AdamW, settings: AdamSettings) -> None:
    """Make the next :func:`apply_update` of ``optimizer`` use ``settings`` (the moments are kept)."""
    for group in optimizer.param_groups:
        group.update(lr=settings.lr, betas=settings.betas, eps=settings.eps, weight_decay=settings.weight_decay)


def apply_update(optimizer: torch.optim.Optimizer, grad_clip: float | None, shard: Shard = Shard()) -> float | None:
    """Sum the ranks' gradients of ``optimizer``'s parameters, clip their global norm to
    ``grad_clip``, and step; then clear the gradients. Returns the norm before clipping, or None
    when it is not finite: that update is never applied (whatever slipped past the loss's own
    checks), its gradients are dropped."""
    trainable = [p for group in optimizer.param_groups for p in group["params"]]
    shard.sum_gradients(trainable)
    limit = grad_clip if grad_clip else math.inf
    norm = float(shard.full(torch.nn.utils.clip_grad_norm_(trainable, limit)))
    if math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm if math.isfinite(norm) else None
