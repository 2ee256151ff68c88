"""``launcher: ray`` vs the default local launcher: the same run, its workers started either way.

    python bench/launchers.py [--quick] [--out DIR]

Two real ``echo2 train`` runs of the default config (shipped model, two workers, async S = 1),
one after the other: ``launcher=local`` (workers as child processes) and ``launcher=ray``
(workers as actors on a local Ray cluster started for the run). Reported per launcher: held-out
greedy accuracy and sampled reward before and after (mean of the last 3 evals), wall time,
samples/s end to end, learner utilization, groups dropped as stale, dead workers, the lease
and group ledgers from the run's reliability report, and the audit's books from the run's
metrics (groups audited, their share, the audit rate at the last step, audit and reward
seconds). ``wall_vs_local`` is the launcher's cost on wall time; runs are sequential, so it also holds the machine's drift between them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

LAUNCHERS = ("local", "ray")


def audit_books(run_dir: Path, groups_trained: int) -> dict[str, float]:
    """What the learner's audits covered and cost over the run (docs/security.md quotes them)."""
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    audited = sum(r["audited_groups"] for r in steps)
    return {"audited_groups": audited, "audited_share": audited / max(groups_trained, 1),
            "audit_rate_last": steps[-1]["audit_rate_mean"], "audit_seconds": sum(r["audit_seconds"] for r in steps),
            "reward_seconds": steps[-1]["reward_seconds"]}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/launchers")
    steps = 8 if args.quick else 200
    rows = []
    for launcher in LAUNCHERS:
        print(f"== launcher={launcher}", flush=True)
        summary = run_training(load_config(overrides=[
            f"launcher={launcher}", f"run.steps={steps}", f"run.dir={args.out / 'runs'}", f"run.name={launcher}",
            "telemetry.progress=false", "telemetry.tensorboard=false", "eval.show=0",
            *(["eval.every=4", "eval.size=20"] if args.quick else [])]))
        result, report = summary.result, summary.reliability
        rows.append({
            "launcher": launcher, "steps": result.steps,
            "acc_start": summary.accuracy_before, "acc_final": summary.accuracy_after,
            "sampled_start": summary.sampled_reward_before, "sampled_final": summary.sampled_reward_after,
            "wall_s": result.wall_seconds, "samples_per_s": result.samples / result.wall_seconds,
            "learner_util": result.utilization, "stale_groups": summary.groups_dropped,
            "workers_dead": report["workers_dead"], "leases_issued": report["leases_issued"],
            "leases_completed": report["leases_completed"], "groups_accepted": report["groups_accepted"],
            "prompts_lost": report["prompts_unaccounted"], "run_dir": str(summary.run_dir),
            **audit_books(summary.run_dir, report["groups_trained"]),
        })
    for row in rows:
        row["wall_vs_local"] = row["wall_s"] / rows[0]["wall_s"]
    columns = ["launcher", "steps", "acc_start", "acc_final", "sampled_start", "sampled_final", "wall_s",
               "wall_vs_local", "samples_per_s", "learner_util", "stale_groups", "workers_dead", "leases_issued",
               "leases_completed", "prompts_lost"]
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
