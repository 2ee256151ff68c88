"""How much staleness for how much speed? sync vs pull vs async S = 1, 2, 4, with and without a slow link.

    python bench/staleness.py [--quick] [--out DIR]

Every row is a real ``echo2 train`` run (learner + coordinator in this process, two worker
processes), same task, model, worker count and step budget; rows differ only in protocol,
staleness bound S and the extra delay added to every weight fetch (the "slow link"). Measured
side by side in one run: learner utilization, samples/s, wall time to a target held-out
accuracy, final accuracy (mean of the last 3 evals), groups dropped as stale, and speed-up
against the synchronous row with the same link.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

SETTINGS = [("sync", 0), ("pull", 1), ("async", 1), ("async", 2), ("async", 4)]


def time_to_target(run_dir: Path, target: float) -> float | None:
    records = read_jsonl(run_dir / "metrics.jsonl")
    start = records[0]["time"]
    for record in records:
        if record.get("eval_accuracy", -1.0) >= target:
            return record["time"] - start
    return None


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/staleness")
    steps, eval_every, eval_size, delay = (6, 3, 100, 0.3) if args.quick else (80, 10, 500, 1.0)
    settings = SETTINGS[:1] + SETTINGS[2:3] if args.quick else SETTINGS
    rows = []
    for fetch_delay in (0.0, delay):
        for protocol, staleness in settings:
            name = f"{protocol}-S{staleness}-delay{fetch_delay:g}"
            print(f"== {name}", flush=True)
            config = load_config(overrides=[
                f"protocol={protocol}", f"staleness={staleness}", f"workers.fetch_delay_s={fetch_delay}",
                f"run.steps={steps}", f"eval.every={eval_every}", f"eval.size={eval_size}", "eval.show=0",
                f"run.dir={args.out / 'runs'}", f"run.name={name}", "telemetry.progress=false",
                "telemetry.tensorboard=false", "checkpoint.every=0",
            ])
            summary = run_training(config)
            result = summary.result
            rows.append({
                "protocol": protocol, "S": staleness, "fetch_delay_s": fetch_delay,
                "steps": result.steps, "wall_s": result.wall_seconds,
                "learner_util": result.utilization,
                "samples_per_s": result.samples / max(result.wall_seconds, 1e-9),
                "acc_start": summary.accuracy_before, "acc_final": summary.accuracy_after,
                "dropped": summary.groups_dropped, "run_dir": str(summary.run_dir),
            })
    target = rows[0]["acc_start"] + 0.02
    for row in rows:
        row["time_to_target_s"] = time_to_target(Path(row["run_dir"]), target)
        sync = next(r for r in rows if r["protocol"] == "sync" and r["fetch_delay_s"] == row["fetch_delay_s"])
        row["speedup_vs_sync"] = row["samples_per_s"] / sync["samples_per_s"]
    columns = ["protocol", "S", "fetch_delay_s", "steps", "wall_s", "learner_util", "samples_per_s",
               "speedup_vs_sync", "time_to_target_s", "acc_start", "acc_final", "dropped"]
    print(f"\ntarget accuracy for time_to_target_s: {target:.3f} (start + 2 points)")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"target_accuracy": target, "quick": args.quick, "steps": steps})
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'staleness.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['protocol']} S={r['S']}\n+{r['fetch_delay_s']:g}s" for r in rows]
    bars.bar(range(len(rows)), [r["learner_util"] for r in rows], color=[
        "tab:orange" if r["fetch_delay_s"] else "tab:blue" for r in rows])
    bars.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
    bars.set_ylabel("learner utilization")
    bars.set_title("learner utilization (orange: slow link)")
    for row in rows:
        records = [r for r in read_jsonl(Path(row["run_dir"]) / "metrics.jsonl") if "eval_accuracy" in r]
        start = records[0]["time"]
        curves.plot([r["time"] - start for r in records], [r["eval_accuracy"] for r in records],
                    "--" if row["fetch_delay_s"] else "-", label=f"{row['protocol']} S={row['S']} "
                    f"+{row['fetch_delay_s']:g}s")
    curves.set_xlabel("wall time (s)")
    curves.set_ylabel("held-out greedy accuracy")
    curves.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "staleness.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
