"""Does ``echo2 plan`` predict configurations nobody ran? Calibrate once, then held-out runs.

    python bench/capacity.py [--quick] [--out DIR] [--runs DIR]

One calibration configuration (``bench/heldout.py``: async S=1, two workers at a quarter speed,
run once per round of held-out runs and pooled over those runs) measures the learner's step time, a worker's generation rate and lease overhead, and a version's
fixed dissemination cost. From that alone, the capacity model (``echo2 plan --calibration``:
:func:`echo2.planning.calibration.inventory_for` + :mod:`echo2.planning.capacity`) predicts the
steady-state learner utilization and seconds per step of each held-out configuration (other S,
protocols, fleet sizes and speeds, capped uplinks), which is then trained for real (after a
warm-up of a few steps). ``--runs DIR`` reuses the run directories under DIR (e.g. those of
bench/simulator.py) instead of training again.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, write_results  # noqa: E402
from heldout import at_speed, config_for, machine_ratio, measured, start, summary  # noqa: E402

from echo2.planning.calibration import inventory_for  # noqa: E402
from echo2.planning.provision import provision  # noqa: E402

WARMUP_STEPS = 5


def predict(config, calibration) -> dict[str, float]:
    """``echo2 plan --calibration``'s figures for the config as given (every worker runs)."""
    plan = provision(inventory_for(config, calibration), config.learner.groups_per_step * config.rollout.group_size,
                     config.staleness, config.broadcast.mode, config.broadcast.chunk_mib, activate=False)
    return {"T_bcast_s": plan.broadcast_s, "sum_mu": plan.throughput, "util_predicted": plan.utilization,
            "step_s_predicted": plan.step_s}


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
    columns = ["config", "regime", "S", "T_bcast_s", "sum_mu", "runs", "util_measured", "util_predicted",
               "util_error_points", "step_s_measured", "step_s_spread_pct", "step_s_predicted", "step_error_pct",
               "machine_vs_calibration", "step_error_at_speed_pct"]
    print(format_table(rows, columns))
    util, step, speed = (summary(rows, key) for key in ("util_error_points", "step_error_pct", "step_error_at_speed_pct"))
    print(f"\nutilization error: median {util['median_abs']:.1f} points, worst {util['worst_abs']:.1f}; "
          f"seconds per step: median {step['median_abs']:.1f}%, worst {step['worst_abs']:.1f}% "
          f"(at the machine's measured speed: median {speed['median_abs']:.1f}%, worst {speed['worst_abs']:.1f}%; "
          f"{len(rows)} held-out configurations)")
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps, "warmup_steps": WARMUP_STEPS,
                                          "repeats": max(row["runs"] for row in rows),
                                          "calibration": calibration.model_dump(mode="json"),
                                          "util_error_points": util, "step_error_pct": step,
                                          "step_error_at_speed_pct": speed})
    plot(rows, args.out)
    print(f"wrote {path} and {args.out / 'capacity.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    markers = {"learner": "o", "generation": "s", "dissemination": "^"}
    for ax, key, label, band in ((axes[0], "util", "learner utilization", "±10 points"),
                                 (axes[1], "step_s", "seconds per learner step", "±10%")):
        top = 1.05 if key == "util" else 1.1 * max(max(r[f"{key}_measured"], r[f"{key}_predicted"]) for r in rows)
        for row in rows:
            ax.scatter(row[f"{key}_measured"], row[f"{key}_predicted"], marker=markers[row["regime"]],
                       label=f"{row['config']} ({row['regime']})")
        ax.plot([0, top], [0, top], "k--", lw=0.8)
        low, high = ([-0.1, top - 0.1], [0.1, top + 0.1]) if key == "util" else ([0, 0.9 * top], [0, 1.1 * top])
        ax.fill_between([0, top], low, high, color="gray", alpha=0.15, label=band)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted by echo2 plan --calibration ({label})")
    axes[0].legend(fontsize=6, loc="upper left")
    fig.suptitle("held-out configurations, predicted from one calibration run")
    fig.tight_layout()
    fig.savefig(out / "capacity.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
