"""The losses a Tinker training client names (``forward_backward(data, loss_fn)``), on echo2's parts.

A Tinker datum gives, per target position, the token to score and the loss's inputs: ``weights``
(``cross_entropy``), or ``logprobs`` (the sampler's) and ``advantages`` (the policy-gradient
losses). Each loss is the *sum* over positions of its per-token term (the API reports it as
``loss:sum``); how a batch is normalised is the client's choice, made in the advantages or weights
it sends. The policy-gradient terms are echo2's own (:mod:`.surrogate`), the ones its GRPO-family
objectives compose, so a client's step and echo2's step on the same batch are the same update
(``tests/integration/test_tinker_service.py`` checks it):

* ``cross_entropy``: ``-w * log pi_theta``.
* ``importance_sampling``: ``-r * A`` with ``r = pi_theta / q`` (q: the sampler's probability), the
  unclipped surrogate (REINFORCE with importance weights).
* ``ppo``: ``-min(r A, clip(r, low, high) A)``, the clipped surrogate; ``loss_fn_config`` may set
  ``clip_low_threshold`` and ``clip_high_threshold`` (ratios, default 0.8 and 1.2).
* ``cispo``: ``-sg(clip(r, low, high)) * log pi_theta * A`` (same thresholds and defaults).

``stable_reinforce`` (whose objective is not published), ``dro``, ``gspo`` and ``custom`` are
refused by name; a client's own loss still works through ``forward_backward_custom``, which the
SDK runs as a forward pass and a ``cross_entropy`` with the loss's gradients as weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from echo2.learner.objectives.surrogate import cispo_surrogate, clipped_surrogate, importance_ratios

#: Each loss -> the ``loss_fn_inputs`` it needs besides ``target_tokens``.
TINKER_LOSSES: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("weights",),
    "importance_sampling": ("logprobs", "advantages"),
    "ppo": ("logprobs", "advantages"),
    "cispo": ("logprobs", "advantages"),
}
#: The clip thresholds' defaults (ratios), for ``ppo`` and ``cispo``.
DEFAULT_CLIP = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


class UnsupportedLoss(ValueError):
    """A loss or a loss option this service does not compute: the message names what it does."""


@dataclass(frozen=True)
class LossSpec:
    """A validated ``(loss_fn, loss_fn_config)``."""

    name: str
    clip_low: float = 0.2
    """``1 - clip_low_threshold``: how far below 1 the ratio may go before it is clipped."""
    clip_high: float = 0.2
    """``clip_high_threshold - 1``."""

    @classmethod
    def parse(cls, name: str, config: dict[str, float] | None) -> LossSpec:
        if name not in TINKER_LOSSES:
            raise UnsupportedLoss(f"loss_fn {name!r} is not supported here; supported: {', '.join(TINKER_LOSSES)} "
                                  f"(and forward_only, and forward_backward_custom)")
        config = dict(config or {})
        clipped = name in ("ppo", "cispo")
        unknown = sorted(set(config) - (set(DEFAULT_CLIP) if clipped else set()))
        if unknown:
            raise UnsupportedLoss(f"loss_fn_config keys {unknown} are not options of {name!r}"
                                  + (f" (it takes {sorted(DEFAULT_CLIP)})" if clipped else " (it takes none)"))
        low, high = (config.get(key, default) for key, default in DEFAULT_CLIP.items())
        if not (0 <= low <= 1 <= high and math.isfinite(high)):
            raise UnsupportedLoss(f"clip thresholds must satisfy 0 <= clip_low_threshold <= 1 <= clip_high_threshold "
                                  f"< inf, got {low} and {high}")
        return cls(name=name, clip_low=1 - low, clip_high=high - 1)


def tinker_loss(spec: LossSpec, logprobs: torch.Tensor, inputs: dict[str, torch.Tensor],
                mask: torch.Tensor) -> torch.Tensor:
    """The per-token loss ``[N, T]`` of ``spec`` (0 off ``mask``); its sum is the batch's loss.
    ``logprobs``: the model's log-probs of the target tokens (with gradient); ``inputs``: the
    datums' loss inputs laid out as ``logprobs`` is."""
    if spec.name == "cross_entropy":
        return -logprobs * inputs["weights"] * mask
    advantages = inputs["advantages"]
    ratios = importance_ratios(logprobs, inputs["logprobs"], None, mask)
    if spec.name == "importance_sampling":
        surrogate = ratios.policy * advantages
    elif spec.name == "ppo":
        surrogate = clipped_surrogate(ratios.policy, advantages, spec.clip_low, spec.clip_high)
    else:
        surrogate = cispo_surrogate(ratios.policy, logprobs, advantages, spec.clip_low, spec.clip_high)
    return -surrogate * mask
