"""The centralized co-located baseline: the learner's own GPUs generate every rollout, then train.

What ECHO-2 compares against (arXiv 2602.02192): no remote workers, no dissemination, fully
on-policy (S = 0). Each step is serial: generate ``R`` rollouts on all learner GPUs
(``generation_tokens_per_s_per_gpu``), hand the weights to the inference engine
(``weight_sync_s``), train (the distributed learner's training time without its publishing, with
the same jitter). The learner's hardware is billed for the whole time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from echo2.simulation.fleet import lognormal
from echo2.simulation.scenario import Scenario


@dataclass(frozen=True)
class CentralizedResult:
    steps: int
    wall_s: float
    busy_s: float
    """Time spent training."""
    price_per_hour: float

    @property
    def utilization(self) -> float:
        """Share of the wall time the GPUs train (the rest they generate or sync weights)."""
        return self.busy_s / self.wall_s

    @property
    def cost_usd(self) -> float:
        return self.price_per_hour * self.wall_s / 3600

    @property
    def cost_per_step(self) -> float:
        return self.cost_usd / self.steps


def generation_s(scenario: Scenario) -> float | None:
    """Seconds the learner's GPUs take to generate one step's rollouts (None: no figure given)."""
    learner = scenario.learner
    if learner.generation_tokens_per_s_per_gpu is None:
        return None
    return scenario.recipe.rollouts_per_step * scenario.workload.response_tokens / (learner.gpus * learner.generation_tokens_per_s_per_gpu)


def simulate_centralized(scenario: Scenario) -> CentralizedResult | None:
    generate = generation_s(scenario)
    if generate is None:
        return None
    rng = random.Random(scenario.seed)
    train = scenario.train_compute_s()
    steps = scenario.recipe.run.steps
    busy = sum(lognormal(rng, train, scenario.learner.step_cv) for _ in range(steps))
    wall = busy + steps * (generate + scenario.learner.weight_sync_s)
    return CentralizedResult(steps=steps, wall_s=wall, busy_s=busy, price_per_hour=scenario.learner_price_per_hour)
