"""The centralized co-located baseline: the learner's own GPUs generate every rollout, then train.

What ECHO-2 compares against (arXiv 2602.02192): no remote workers, no dissemination, fully
on-policy (S = 0). Each step is serial: generate the step's ``B`` groups on the learner's GPUs,
hand the weights to the inference engine (``weight_sync_s``), train (the distributed learner's
training time without its publishing, with the same jitter). The learner's hardware is billed for
the whole time.

Generation is timed as engines behave, not as ``R x mean tokens / peak tokens/s``: each step draws
its groups' response lengths (:mod:`echo2.planning.lengths`), splits the batch over the GPUs in
contiguous chunks (as verl's data-parallel rollout does), and each GPU's engine drains its chunk
on its decode curve, whose KV room is what the trainer leaves it
(:meth:`echo2.simulation.scenario.LearnerSpec.colocated_curve`); the step waits for the slowest
GPU, whose last sequences decode at single-sequence speed (:mod:`echo2.planning.engine_curve`).
Every response at the mean on a flat curve is the old figure exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from echo2.planning.engine_curve import DecodeCurve
from echo2.simulation.fleet import lognormal
from echo2.simulation.scenario import Scenario


@dataclass(frozen=True)
class CentralizedResult:
    steps: int
    wall_s: float
    busy_s: float
    """Time spent training."""
    generation_s: float
    """Time spent generating (the rest of the wall time besides training is the weight hand-over)."""
    tokens: float
    """Response tokens generated over the run."""
    price_per_hour: float

    @property
    def utilization(self) -> float:
        """Share of the wall time the GPUs train (the rest they generate or sync weights)."""
        return self.busy_s / self.wall_s

    @property
    def generation_share(self) -> float:
        """Share of the wall time the GPUs generate."""
        return self.generation_s / self.wall_s

    @property
    def usd_per_token(self) -> float:
        """What one generated token costs on the co-located learner (its stragglers and KV room included)."""
        return self.price_per_hour * self.generation_s / 3600 / self.tokens

    @property
    def cost_usd(self) -> float:
        return self.price_per_hour * self.wall_s / 3600

    @property
    def cost_per_step(self) -> float:
        return self.cost_usd / self.steps


def step_generation_s(curve: DecodeCurve, groups: Sequence[Sequence[float]], engines: int) -> float:
    """Seconds until the last of ``groups``' responses is generated on ``engines`` engines, each
    draining a contiguous chunk of the batch (sizes differing by at most one response)."""
    flat = [length for group in groups for length in group]
    size, extra = divmod(len(flat), engines)
    chunks, start = [], 0
    for engine in range(engines):
        end = start + size + (engine < extra)
        chunks.append(flat[start:end])
        start = end
    return max(curve.drain_s(chunk) for chunk in chunks)


def simulate_centralized(scenario: Scenario) -> CentralizedResult | None:
    learner, workload, recipe = scenario.learner, scenario.workload, scenario.recipe
    curve = learner.colocated_curve(scenario.model, workload.prompt_tokens + workload.response_tokens)
    if curve is None:
        return None
    rng, lengths_rng = random.Random(scenario.seed), random.Random(f"{scenario.seed}:lengths")
    sampler = workload.sampler()
    train = scenario.train_compute_s()
    steps = recipe.run.steps
    busy = sum(lognormal(rng, train, learner.step_cv) for _ in range(steps))
    generation = sum(step_generation_s(curve, [sampler.group(lengths_rng, recipe.rollout.group_size)
                                               for _ in range(recipe.learner.groups_per_step)], learner.gpus)
                     for _ in range(steps))
    wall = busy + generation + steps * learner.weight_sync_s
    return CentralizedResult(steps=steps, wall_s=wall, busy_s=busy, generation_s=generation,
                             tokens=steps * recipe.rollouts_per_step * workload.response_tokens,
                             price_per_hour=scenario.learner_price_per_hour)
