"""Evaluation on the learner's path or off it: the SmolLM2 recipe, evaluated inline vs by an evaluator process.

    python bench/eval_placement.py [--quick] [--out DIR] [--minutes M] [--reuse]

Two runs of ``configs/smollm2-135m-chain-sum.yaml`` one after the other, ``run.max_minutes=M``
(12 by default; the recipe's own 24 needs twice the time): ``eval.where=learner`` (every 20
steps the learner evaluates 200 greedy and 200 sampled completions before its next step) and
``eval.where=process`` (an evaluator process does, on the version's weights, while the learner
trains on: :mod:`echo2.learner.evaluations`). Per run: steps made, the learner's busy share of the
training wall time (from its first step to its last; evaluations and waits for data are not
busy), its utilization as the run reports it (busy / (busy + waiting for data), evaluations
left out), held-out accuracy at the end (the mean of the last three evaluations, as the summary
gives it) and the time to each accuracy target: from the learner's first step to the publish of
the first version evaluated at or above it (read from ``timeline.jsonl``, so an inline
evaluation's own time counts only through the steps it delayed). ``--reuse`` reads runs already in
``OUT/runs`` (made by these same commands) instead of starting them. ``--quick``: the shipped tiny
model, 6 steps each, evaluated every 3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import format_table, parse_args, write_results

RECIPE = "configs/smollm2-135m-chain-sum.yaml"
TARGETS = (0.35, 0.40)


def command(where: str, out: Path, minutes: float, quick: bool) -> list[str]:
    """The ``echo2 train`` command line of one arm."""
    common = [f"eval.where={where}", f"run.dir={out}", f"run.name={where}", "telemetry.progress=false"]
    if quick:
        return [sys.executable, "-m", "echo2.cli", "train", "run.steps=6", "eval.every=3", "eval.size=20",
                "workers.count=1", "telemetry.tensorboard=false", *common]
    return [sys.executable, "-m", "echo2.cli", "train", "--config", RECIPE, f"run.max_minutes={minutes:g}", *common]


def measure(run_dir: Path) -> dict:
    """One run's row (see the module docstring)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    intervals = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    published = {i["version"]: i["end"] for i in intervals if i["who"] == "learner" and i["kind"] == "train"}
    first = min(i["start"] for i in intervals if i["who"] == "learner" and i["kind"] == "train")
    evals = sorted((r["version"], r["eval_accuracy"]) for r in records if "eval_accuracy" in r)
    last = [r for r in records if "reward_mean" in r][-1]
    wall = published[last["version"]] - first
    row = {"where": run_dir.name, "steps": last["version"], "train_wall_s": wall,
           "busy_share": last["learner_busy_s"] / wall, "utilization": last["utilization"],
           "acc_start": evals[0][1], "acc_final": sum(a for _, a in evals[-3:]) / len(evals[-3:]),
           "evals": evals}
    for target in TARGETS:
        hit = next((v for v, accuracy in evals if accuracy >= target and v in published), None)
        row[f"to_{round(100 * target)}pct_s"] = published[hit] - first if hit is not None else None
    return row


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/eval-placement", lambda parser: (
        parser.add_argument("--minutes", type=float, default=12.0, help="run.max_minutes of each run"),
        parser.add_argument("--reuse", action="store_true", help="measure the runs already in OUT/runs")))
    rows = []
    for where in ("learner", "process"):
        run_dir = args.out / "runs" / where
        if not args.reuse:
            print(f"== eval.where={where}", flush=True)
            subprocess.run(command(where, args.out / "runs", args.minutes, args.quick), check=True)
        rows.append(measure(run_dir))
    for row in rows:
        row["steps_vs_inline"] = row["steps"] / rows[0]["steps"]
        row["busy_share_vs_inline"] = row["busy_share"] / rows[0]["busy_share"]
    columns = ["where", "steps", "steps_vs_inline", "train_wall_s", "busy_share", "busy_share_vs_inline",
               "utilization", "acc_start", "acc_final", *[f"to_{round(100 * t)}pct_s" for t in TARGETS]]
    print(format_table(rows, columns))
    meta = {"quick": args.quick, "minutes": args.minutes, "config": None if args.quick else RECIPE, "reused_runs": args.reuse,
            "commands": [" ".join(command(w, args.out / "runs", args.minutes, args.quick)[1:]) for w in ("learner", "process")]}
    models = ("echo2/tiny-arith",) if args.quick else ("smollm2-135m-instruct",)
    print(f"wrote {write_results(args.out, rows, meta, models)}")


if __name__ == "__main__":
    main()
