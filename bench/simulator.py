"""Does the simulator predict real runs? Simulated vs measured learner utilization and wall time.

    python bench/simulator.py [--quick] [--out DIR] [--runs DIR]

Every row is a real ``echo2 train`` run on this machine (cost-aware activation off, so the fleet is
fixed), differing in protocol, staleness bound S, worker speeds, a slow link and a capped learner
uplink with a star broadcast. ``echo2.simulation.calibrate`` turns each run directory into a
scenario from what the run measured (learner step time, each worker's generation rate, request
round trip, per-fetch cost) and its config (protocol, S, batch, bandwidth caps); the simulator
then predicts the run's learner utilization and its wall time after the first batch
(busy + idle), averaged over 5 seeds. ``--runs DIR`` re-analyses the run directories in DIR
instead of training.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.simulation.calibrate import measured, scenario_from_run  # noqa: E402
from echo2.simulation.engine import simulate  # noqa: E402

CONFIGS = [
    ("sync, 2 workers", ["protocol=sync"]),
    ("async S=1, 2 workers", ["protocol=async", "staleness=1"]),
    ("async S=1, workers 1x + 0.3x", ["staleness=1", "workers.fleet=[{throughput_factor: 1.0}, "
                                      "{throughput_factor: 0.3}]"]),
    ("pull S=1, slow link 1s", ["protocol=pull", "staleness=1", "workers.fetch_delay_s=1.0"]),
    ("async S=2, slow link 1.5s", ["staleness=2", "workers.fetch_delay_s=1.5"]),
    ("async S=1, star, learner uplink 24 Mbit/s", ["staleness=1", "broadcast.mode=star",
                                                   "broadcast.learner_upload_mbps=24"]),
]
SEEDS = range(5)


def run_dirs(out: Path, steps: int, quick: bool) -> list[tuple[str, Path]]:
    """Train every configuration (one at a time) and return the run directories."""
    from echo2.config import load_config
    from echo2.launch.train import run_training

    runs = []
    for name, overrides in CONFIGS[:2] if quick else CONFIGS:
        print(f"== {name}", flush=True)
        config = load_config(overrides=overrides + [
            f"run.steps={steps}", "eval.every=1000", "eval.size=20", "eval.show=0", "activation.enabled=false",
            f"run.dir={out / 'runs'}", f"run.name={slug(name)}", "telemetry.progress=false",
            "telemetry.tensorboard=false", "checkpoint.every=0",
        ])
        runs.append((name, run_training(config).run_dir))
    return runs


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "=." else "_" for c in name).strip("_")


def compare(name: str, run_dir: Path) -> dict:
    scenario = scenario_from_run(run_dir)
    real = measured(run_dir)
    results = [simulate(scenario.model_copy(update={"seed": seed}), timeline_workers=0) for seed in SEEDS]
    utilization = statistics.fmean(r.utilization for r in results)
    wall = statistics.fmean(r.train_wall_s for r in results)
    return {
        "config": name, "S": scenario.recipe.staleness, "steps": real["steps"],
        "T_train_s": scenario.train_step_s(), "util_measured": real["utilization"], "util_simulated": utilization,
        "util_error_pct": 100 * (utilization / real["utilization"] - 1), "wall_measured": real["train_wall_s"],
        "wall_simulated": wall, "wall_error_pct": 100 * (wall / real["train_wall_s"] - 1),
        "run_dir": str(run_dir),
    }


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/simulator", lambda parser: parser.add_argument(
        "--runs", type=Path, help="analyse the run directories in this folder instead of training"))
    steps = 8 if args.quick else 30
    names = {slug(name): name for name, _ in CONFIGS}
    runs = ([(names.get(d.name, d.name), d) for d in sorted(args.runs.iterdir()) if (d / "metrics.jsonl").is_file()]
            if args.runs else run_dirs(args.out, steps, args.quick))
    rows = [compare(name, run_dir) for name, run_dir in runs]
    columns = ["config", "S", "steps", "T_train_s", "util_measured", "util_simulated", "util_error_pct",
               "wall_measured", "wall_simulated", "wall_error_pct"]
    print(format_table(rows, columns))
    worst = max(max(abs(r["util_error_pct"]), abs(r["wall_error_pct"])) for r in rows)
    print(f"\nlargest error {worst:.1f}% over {len(rows)} configurations")
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps, "seeds": len(SEEDS)})
    plot(rows, args.out)
    print(f"wrote {path} and {args.out / 'simulator.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, key, label in ((axes[0], "util", "learner utilization"),
                           (axes[1], "wall", "wall time after the first batch (s)")):
        values = [r[f"{key}_measured"] for r in rows] + [r[f"{key}_simulated"] for r in rows]
        top = max(values) * 1.1
        for row in rows:
            ax.scatter(row[f"{key}_measured"], row[f"{key}_simulated"], label=row["config"])
        ax.plot([0, top], [0, top], "k--", lw=0.8)
        ax.fill_between([0, top], [0, 0.9 * top], [0, 1.1 * top], color="gray", alpha=0.15, label="±10%")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle("echo2 simulate fed each real run's measured parameters")
    fig.tight_layout()
    fig.savefig(out / "simulator.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
