"""Does ``echo2 simulate`` predict configurations nobody ran? Calibrate once, then held-out runs.

    python bench/simulator.py [--quick] [--out DIR] [--runs DIR]

The same (pooled) calibration and held-out configurations as bench/capacity.py (``bench/heldout.py``).
:func:`echo2.simulation.calibrate.scenario_for` turns each held-out *config* and the one
calibration into a scenario (``echo2 simulate --calibration``); the simulator predicts the run's
learner utilization and its wall time per step after the first batch (busy + idle over steps),
averaged over 5 seeds, and the configuration is then trained for real. ``--runs DIR`` reuses the
run directories under DIR (e.g. bench/capacity.py's ``--out``) instead of training again.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from heldout import at_speed, config_for, machine_ratio, publish, spread_pct, start  # noqa: E402

from echo2.simulation.calibrate import measured  # noqa: E402
from echo2.simulation.predict import SEEDS, simulated_runs  # noqa: E402


def compare(name: str, regime: str, config, calibration, run_dirs: list[Path], ratio: float | None) -> dict:
    """One held-out configuration: its real runs (the mean over the repeats) against the simulation."""
    reals, results = [measured(run_dir) for run_dir in run_dirs], simulated_runs(config, calibration, name)
    steps = reals[0]["steps"]
    if any(real["steps"] != steps for real in reals):
        raise ValueError(f"{name}: the repeated runs measured different step counts")
    real_step_s = [real["train_wall_s"] / steps for real in reals]
    row = {"config": name, "regime": regime, "S": config.staleness, "steps": steps, "runs": len(reals),
           "util_measured": statistics.fmean(real["utilization"] for real in reals),
           "util_simulated": statistics.fmean(r.utilization for r in results),
           "step_s_measured": statistics.fmean(real_step_s), "step_s_spread_pct": spread_pct(real_step_s),
           "step_s_simulated": statistics.fmean(r.train_wall_s for r in results) / steps}
    row["util_error_points"] = 100 * (row["util_simulated"] - row["util_measured"])
    row["step_error_pct"] = 100 * (row["step_s_simulated"] / row["step_s_measured"] - 1)
    at_machine_speed = statistics.fmean(r.train_wall_s for r in simulated_runs(config, at_speed(calibration, ratio), name))
    row["machine_vs_calibration"] = ratio
    row["step_error_at_speed_pct"] = 100 * (at_machine_speed / steps / row["step_s_measured"] - 1)
    return row


def main() -> None:
    args, steps, configs, run_dirs, runs_at, calibration, probe = start(__doc__.splitlines()[0], "bench/out/simulator")
    rows = []
    for name, regime, overrides in configs:
        config = config_for(overrides, steps, runs_at, name)
        rows.append(compare(name, regime, config, calibration, run_dirs[name], machine_ratio(run_dirs[name], probe)))
    columns = ["config", "regime", "S", "steps", "runs", "util_measured", "util_simulated", "util_error_points",
               "step_s_measured", "step_s_spread_pct", "step_s_simulated", "step_error_pct", "machine_vs_calibration",
               "step_error_at_speed_pct"]
    publish("simulator", rows, columns, args.out, {"quick": args.quick, "steps": steps, "seeds": len(SEEDS),
                                                   "calibration": calibration.model_dump(mode="json")},
            "simulated", f"echo2 simulate --calibration, mean of {len(SEEDS)} seeds")


if __name__ == "__main__":
    main()
