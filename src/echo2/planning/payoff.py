"""Where distributing pays: the dollars ratio (distributed / centralized) over the two inputs that
decide it most.

Per learner step, at equal steps, the centralized co-located baseline pays its learner for training,
generating and handing the weights over, ``P_L (T + G_c + sync)``; the distributed run pays its
learner for training and publishing, idle a share ``1 - U`` of its time, ``P_L (T + publish) / U``,
plus its workers ``W``. Write ``W = rho P_L G_c``, where ``rho`` is what a trained token costs on
the workers over what it costs on the co-located learner (each as billed: the workers' idle, parked
and wasted time in theirs, the co-located engine's stragglers and KV limits in the learner's), and
``g = G_c / (T + G_c + sync)``, the baseline's share of a step spent generating. Taking the
publishing for the hand-over (both move one version):

    ratio = (1 - g) / U + rho g

At ``U = 1`` distributing pays exactly where ``rho < 1``, and saves ``(1 - rho) g`` of the
baseline: the share of the step it moves off the learner, at the price difference. Idle learner
time (``U < 1``) adds ``(1 - g)(1/U - 1)``. ECHO-2 (arXiv 2602.02192) reports 33-36% lower cost;
by this arithmetic that needs, at ``U = 1``, e.g. ``g = 0.6`` and workers at 40-45% of the
learner's price per token.
"""

from __future__ import annotations

from dataclasses import dataclass


def cost_ratio(token_price_ratio: float, generation_share: float, utilization: float = 1.0) -> float:
    """Distributed over centralized dollars at equal learner steps (module docstring)."""
    return (1 - generation_share) / utilization + token_price_ratio * generation_share


@dataclass(frozen=True)
class PayoffPoint:
    """Where one run sits on the map."""

    token_price_ratio: float
    """``rho``: the workers' dollars per trained token over the co-located learner's."""
    generation_share: float
    """``g``: the centralized baseline's share of a step spent generating."""
    utilization: float
    """``U``: the distributed learner's busy share."""
    ratio: float
    """The run's own dollars ratio (simulated), which :func:`cost_ratio` approximates."""

    @property
    def predicted(self) -> float:
        return cost_ratio(self.token_price_ratio, self.generation_share, self.utilization)


@dataclass(frozen=True)
class Baseline:
    """The centralized co-located baseline per learner step, as ``echo2 plan --scenario`` prints it."""

    cost_per_step: float
    generation_share: float
    """``g``."""
    usd_per_token: float
    """What one generated token costs on the co-located learner (stragglers and KV room included)."""


def baseline_lines(baseline: Baseline, worker_usd_per_token: dict[str, float]) -> list[str]:
    """The baseline, each worker class's ``rho`` at its lease rate, and the ratio at full utilization."""
    lines = [f"centralized co-located baseline: ${baseline.cost_per_step:.4f} per step, generating "
             f"{100 * baseline.generation_share:.1f}% of it at ${1e6 * baseline.usd_per_token:.3f} per million tokens",
             f"{'worker class':<24}{'$/M tokens':>12}{'rho':>7}{'ratio at U = 1':>16}"]
    for name, usd in worker_usd_per_token.items():
        rho = usd / baseline.usd_per_token
        lines.append(f"{name:<24}{1e6 * usd:>12.3f}{rho:>7.2f}{cost_ratio(rho, baseline.generation_share):>16.2f}")
    lines.append("(distributed / centralized dollars = (1 - g) / U + rho g; distributing pays where rho < 1 "
                 "and the learner stays busy: docs/simulation.md)")
    return lines
