"""What ``echo2 plan --calibration`` predicts for a run config as given: the fluid capacity model
where it holds, the simulator where it does not.

The fluid model (:mod:`echo2.planning.capacity`) charges every version the last worker's arrival,
as if the whole fleet generated each batch together. On a pipelined chain of more than two workers,
or a relay tree, whose uplinks are capped, that is wrong: the head of the tree fetches every version
back to back, the workers behind it get every other one (they ask for the newest and wait out their
relay's current fetch), and those whose copy always lands too stale to lease never generate. The
step period is then set by the first workers alone: the simulator, which times every fetch along
its relay (:mod:`echo2.simulation.fetching`), gives the same period for chains of two, three and
four workers (1.85 s at S = 1 on 8 Mbit/s, where the fluid model says 2.07, 2.51, 2.99 s), and
the held-out S = 1 binary tree ran at 1.84 s against the fluid model's 2.53 s (docs/capacity.md).
A star on a capped learner uplink with S >= 1 is the other case: versions reach its workers one
at a time, on the uplink's fetch grid, and the fluid model's closed form for that loop
(:func:`echo2.planning.capacity.star_loop_s`, a mean grid wait of ``C / 2``) over-predicted the
held-out stars by up to 13.3% (+10.6% and +11.0% at 8 Mbit/s on two machine days), where the
simulator, which times every fetch on the shared throttle, stayed within 4.7%.
There the prediction is the simulator's, the mean of :data:`SEEDS` seeds of the calibrated
scenario (:func:`echo2.simulation.calibrate.scenario_for`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from echo2.config import Config
from echo2.planning.calibration import Calibration, inventory_for
from echo2.planning.provision import provision
from echo2.simulation.calibrate import scenario_for
from echo2.simulation.engine import simulate
from echo2.simulation.results import SimResult

#: Seeds of the simulated prediction (step and lease times are drawn with the calibrated spread).
SEEDS = range(5)
#: Steps simulated at most: the steady state is reached long before, and a plan must be quick.
MAX_SIMULATED_STEPS = 200


@dataclass(frozen=True)
class Prediction:
    """Steady-state figures of a config run as given (every configured worker active)."""

    method: str
    """``fluid`` (the capacity model) or ``simulated`` (outside the fluid model's domain)."""
    utilization: float
    step_s: float
    broadcast_s: float
    """The fluid model's dissemination time (the last worker's arrival), shown either way."""
    throughput: float
    """Summed rollouts/s of the configured workers."""


def fluid_model_limit(config: Config) -> str | None:
    """Why the fluid model does not hold for ``config`` (None when it does), with S >= 1 and a capped
    uplink: a pipelined relay chain of more than two workers or a relay tree, or a star of two or
    more on a capped learner uplink (module docstring)."""
    broadcast, workers, emulation = config.broadcast, config.workers, config.emulation
    if config.staleness == 0 or workers.count < 2:
        return None
    if broadcast.mode == "star":
        if emulation.learner_upload_mbps is None:
            return None
        return (f"a star of {workers.count} workers on a capped learner uplink: versions reach them one at "
                f"a time on the uplink's fetch grid, which the fluid model only approximates")
    capped = (emulation.learner_upload_mbps is not None or emulation.worker_upload_mbps is not None
              or any(spec.upload_mbps is not None for spec in emulation.fleet))
    if workers.count <= 2 or not capped:
        return None
    shape = f"relay tree (fan-out {broadcast.fan_out})" if broadcast.fan_out > 1 else "relay chain"
    return (f"a pipelined {shape} of {workers.count} workers on capped uplinks: the workers behind its "
            f"head do not keep up with every version, which the fluid model assumes")


def simulated_runs(config: Config, calibration: Calibration, name: str = "calibrated",
                   max_steps: int | None = None) -> list[SimResult]:
    """``config``'s calibrated scenario simulated once per seed of :data:`SEEDS` (at most
    ``max_steps`` steps each): what ``echo2 simulate --calibration`` reports, the mean of these."""
    scenario = scenario_for(config, calibration, name)
    if max_steps is not None:
        recipe = scenario.recipe
        run = recipe.run.model_copy(update={"steps": min(recipe.run.steps, max_steps)})
        scenario = scenario.model_copy(update={"recipe": recipe.model_copy(update={"run": run})})
    return [simulate(scenario.model_copy(update={"seed": seed}), timeline_workers=0) for seed in SEEDS]


def simulated_figures(config: Config, calibration: Calibration) -> tuple[float, float]:
    """``config``'s simulated (utilization, seconds per step): the mean over :data:`SEEDS`."""
    results = simulated_runs(config, calibration, max_steps=MAX_SIMULATED_STEPS)
    return (statistics.fmean(result.utilization for result in results),
            statistics.fmean(result.train_wall_s / result.steps for result in results))


def predict_config(config: Config, calibration: Calibration) -> Prediction:
    """``config``'s utilization and seconds per step, timed by ``calibration``."""
    rollouts = config.learner.groups_per_step * config.rollout.group_size
    fluid = provision(inventory_for(config, calibration), rollouts, config.staleness, config.broadcast.mode,
                      config.broadcast.chunk_mib, activate=False)
    if fluid_model_limit(config) is None:
        return Prediction("fluid", fluid.utilization, fluid.step_s, fluid.broadcast_s, fluid.throughput)
    utilization, step_s = simulated_figures(config, calibration)
    return Prediction("simulated", utilization, step_s, fluid.broadcast_s, fluid.throughput)
