"""Does the capacity model predict learner utilization? Predicted vs measured on real local runs.

    python bench/capacity.py [--quick] [--out DIR]

Every row is a real ``echo2 train`` run (two or one worker processes; cost-aware activation off so
the fleet is fixed), differing in staleness bound S, worker count, emulated worker speed and
slow-link delay. From each run's own measurements — learner step time T_train, dissemination
latency T_bcast, each worker's wall throughput mu_i (all after a short warm-up) — the model of
``echo2.planning.capacity`` predicts utilization and seconds per step; the table sets them against
the measured values (same steps).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.planning.capacity import StepTimes, predicted_utilization, step_period  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

CONFIGS = [
    ("sync, 2 workers", ["protocol=sync"]),
    ("async S=1, 2 workers", ["protocol=async", "staleness=1"]),
    ("async S=1, 1 worker at 0.5x", ["staleness=1", "workers.count=1", "workers.fleet=[{throughput_factor: 0.5}]"]),
    ("async S=1, workers 1x + 0.3x", ["staleness=1", "workers.fleet=[{throughput_factor: 1.0}, "
                                      "{throughput_factor: 0.3}]"]),
    ("async S=2, slow link 1.5s", ["staleness=2", "workers.fetch_delay_s=1.5"]),
    ("async S=1, slow link 1.5s", ["staleness=1", "workers.fetch_delay_s=1.5"]),
]
WARMUP_STEPS = 5


def measure(run_dir: Path, rollouts_per_step: int, staleness: int) -> dict:
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "reward_mean" in r][WARMUP_STEPS:]
    first, last = steps[0], steps[-1]
    busy = last["learner_busy_s"] - first["learner_busy_s"]
    idle = last["learner_idle_s"] - first["learner_idle_s"]
    n = len(steps) - 1
    workers = {k for r in steps for k in r if k.endswith("/measured_rollouts_per_s")}
    throughput = sum(statistics.mean(r[k] for r in steps if k in r) for k in workers)
    dissemination = [r["dissemination_max_s"] for r in steps if "dissemination_max_s" in r]
    times = StepTimes(busy / n, statistics.mean(dissemination) if dissemination else 0.0, rollouts_per_step,
                      staleness)
    return {
        "T_train_s": times.train_s, "T_bcast_s": times.broadcast_s, "sum_mu": throughput,
        "util_measured": busy / (busy + idle), "util_predicted": predicted_utilization(times, throughput),
        "step_s_measured": (last["time"] - first["time"]) / n, "step_s_predicted": step_period(times, throughput),
    }


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/capacity")
    steps = 12 if args.quick else 45
    configs = CONFIGS[:2] if args.quick else CONFIGS
    rows = []
    for name, overrides in configs:
        print(f"== {name}", flush=True)
        config = load_config(overrides=overrides + [
            f"run.steps={steps}", "eval.every=1000", "eval.size=50", "eval.show=0", "activation.enabled=false",
            f"run.dir={args.out / 'runs'}", f"run.name={name.replace(' ', '_').replace(',', '')}",
            "telemetry.progress=false", "telemetry.tensorboard=false", "checkpoint.every=0",
        ])
        summary = run_training(config)
        rollouts = config.learner.groups_per_step * config.rollout.group_size
        row = {"config": name, "S": config.staleness,
               **measure(summary.run_dir, rollouts, config.staleness)}
        row["error_points"] = 100 * (row["util_predicted"] - row["util_measured"])
        rows.append(row)
    columns = ["config", "S", "T_train_s", "T_bcast_s", "sum_mu", "util_measured", "util_predicted",
               "error_points", "step_s_measured", "step_s_predicted"]
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps, "warmup_steps": WARMUP_STEPS})
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'capacity.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for row in rows:
        ax.scatter(row["util_measured"], row["util_predicted"])
        ax.annotate(row["config"], (row["util_measured"], row["util_predicted"]), fontsize=7)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.fill_between([0, 1], [-0.1, 0.9], [0.1, 1.1], color="gray", alpha=0.15, label="±10 points")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("measured learner utilization")
    ax.set_ylabel("predicted (capacity model)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "capacity.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
