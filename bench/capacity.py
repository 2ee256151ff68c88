"""Does ``echo2 plan`` predict configurations nobody ran? Calibrate once, then held-out runs.

    python bench/capacity.py [--quick] [--out DIR] [--runs DIR]

One calibration configuration (``bench/heldout.py``: async S=1, two workers at a quarter speed,
run once per round of held-out runs and pooled over those runs) measures the learner's step time, a worker's generation rate and lease overhead, and a version's
fixed dissemination cost. From that alone, ``echo2 plan --calibration`` (:func:`echo2.simulation.predict.predict_config`:
the capacity model, :mod:`echo2.planning.capacity`, or, for a capped relay chain of more than two
workers or a relay tree, where that model does not hold, the simulator; column ``method``) predicts
the steady-state learner utilization and seconds per step of each held-out configuration (other S,
protocols, fleet sizes and speeds, capped uplinks), which is then trained for real (after a
warm-up of a few steps). ``--runs DIR`` reuses the run directories under DIR (e.g. those of
bench/simulator.py) instead of training again.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from heldout import at_speed, config_for, machine_ratio, measured, publish, start  # noqa: E402

from echo2.simulation.predict import predict_config  # noqa: E402

WARMUP_STEPS = 5


def predict(config, calibration) -> dict:
    """``echo2 plan --calibration``'s figures for the config as given (every worker runs)."""
    plan = predict_config(config, calibration)
    return {"method": plan.method, "T_bcast_s": plan.broadcast_s, "sum_mu": plan.throughput,
            "util_predicted": plan.utilization, "step_s_predicted": plan.step_s}


def main() -> None:
    args, steps, configs, run_dirs, runs_at, calibration, probe = start(__doc__.splitlines()[0], "bench/out/capacity")
    rows = []
    for name, regime, overrides in configs:
        config = config_for(overrides, steps, runs_at, name)
        row = {"config": name, "regime": regime, "S": config.staleness, **predict(config, calibration),
               "runs": len(run_dirs[name]), **measured(run_dirs[name], WARMUP_STEPS)}
        row["util_error_points"] = 100 * (row["util_predicted"] - row["util_measured"])
        row["step_error_pct"] = 100 * (row["step_s_predicted"] / row["step_s_measured"] - 1)
        row["machine_vs_calibration"] = ratio = machine_ratio(run_dirs[name], probe)
        at_machine_speed = predict(config, at_speed(calibration, ratio))["step_s_predicted"]
        row["step_error_at_speed_pct"] = 100 * (at_machine_speed / row["step_s_measured"] - 1)
        rows.append(row)
    columns = ["config", "regime", "S", "method", "T_bcast_s", "sum_mu", "runs", "util_measured", "util_predicted",
               "util_error_points", "step_s_measured", "step_s_spread_pct", "step_s_predicted", "step_error_pct",
               "machine_vs_calibration", "step_error_at_speed_pct"]
    publish("capacity", rows, columns, args.out, {"quick": args.quick, "steps": steps, "warmup_steps": WARMUP_STEPS,
                                                  "repeats": max(row["runs"] for row in rows),
                                                  "calibration": calibration.model_dump(mode="json")},
            "predicted", "echo2 plan --calibration")


if __name__ == "__main__":
    main()
