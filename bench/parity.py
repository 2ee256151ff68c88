"""Did a change of the run's books move a figure? The shipped scenarios simulated, and the default
run trained, on the code of a git ref and on the working tree, side by side.

    python bench/parity.py [--before REF] [--quick] [--repeats N] [--attacks] [--out DIR]

1. Every ``configs/scenarios/*.yaml`` simulated on each side. The simulator is deterministic: a
   figure that differs is the change's doing. Per scenario and side: steps, simulated seconds,
   learner utilization, the cost ratio to the centralized baseline, workers active on average,
   the mean dissemination time, the reliability counts, and whether the per-step records (every
   figure of every step) are byte-identical.
2. The default ``echo2 train`` run (the shipped model, the default config; ``--quick``: 100 steps)
   on each side, one after the other: steps and samples a second, the last evaluation's accuracy
   and the reliability report. A real run: its pace differs from run to run by a few percent, so
   ``--repeats N`` runs N pairs, the sides alternating (before, after, after, before, ...), and the
   row gives each side's median pace beside every pair's ratio.
3. ``--attacks``: the attacks bench's quick rows (``bench/attacks.py --quick``) on each side: each
   attack's verdict (``detected``) and whether any of the attacker's groups was trained after it.

Each side runs in its own interpreter with ``PYTHONPATH`` at its ``src/`` (the ref's a
``git worktree`` made for the run and removed after).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, git, parse_args, write_results  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "configs" / "scenarios"

#: Run in each side's interpreter: one JSON line per scenario.
SIMULATE = """
import hashlib, json, sys
from echo2.simulation.engine import simulate
from echo2.simulation.scenario import load_scenario
for path in sys.argv[1:]:
    result = simulate(load_scenario(path), timeline_workers=0)
    hours = sum(result.worker_hours.values())
    print(json.dumps({
        "steps": result.steps, "wall_s": result.wall_s, "util": result.utilization,
        "ratio": result.cost_usd / result.centralized.cost_usd, "mean_active": hours * 3600 / result.wall_s,
        "dissemination_s": result.summary()["dissemination_mean_s"], "reliability": result.reliability,
        "records_sha256": hashlib.sha256(json.dumps(result.records, sort_keys=True).encode()).hexdigest()}))
"""


def side_env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}


def simulate_side(src: Path, paths: list[Path]) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", SIMULATE, *map(str, paths)], env=side_env(src), cwd=src.parent,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"simulating on {src}: {out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def train_side(src: Path, run_dir: Path, steps: int | None) -> dict:
    overrides = [f"run.dir={run_dir.parent}", f"run.name={run_dir.name}", "telemetry.progress=false"]
    overrides += [f"run.steps={steps}"] if steps else []
    out = subprocess.run([sys.executable, "-m", "echo2.cli", "train", *overrides], env=side_env(src), cwd=src.parent,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"training on {src}: {out.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "loss" in r]
    evals = [r["eval_accuracy"] for r in records if "eval_accuracy" in r]
    wall = trained[-1]["time"] - trained[0]["time"]
    samples = sum(r["samples"] for r in trained[1:])
    return {"steps": len(trained), "steps_per_s": (len(trained) - 1) / wall if wall > 0 else None,
            "samples_per_s": samples / wall if wall > 0 else None, "accuracy": evals[-1] if evals else None,
            "reliability": json.loads((run_dir / "reliability.json").read_text())}


def train_pairs(sides: dict[str, Path], runs: Path, steps: int | None, repeats: int) -> dict:
    """``repeats`` default runs a side, alternating which goes first (a machine that slows or speeds
    up over the runs then weighs on both sides alike). Per side: the last run's figures with the
    median pace of all; and the pace ratio (after / before, samples a second) of every pair."""
    runs_of: dict[str, list[dict]] = {name: [] for name in sides}
    for pair in range(repeats):
        for name in (list(sides) if pair % 2 == 0 else list(sides)[::-1]):
            runs_of[name].append(train_side(sides[name], runs / f"{name}-{pair}", steps))
    merged = {}
    for name, done in runs_of.items():
        merged[name] = {**done[-1], **{key: statistics.median(run[key] for run in done)
                                      for key in ("steps_per_s", "samples_per_s")}}
    merged["pace_ratios"] = " ".join(f"{after['samples_per_s'] / before['samples_per_s']:.3f}"
                                     for before, after in zip(runs_of["before"], runs_of["after"], strict=True))
    return merged


def attacks_side(src: Path, out: Path) -> dict[str, dict]:
    """The attacks bench's quick rows on one side, by attack kind."""
    bench = src.parent / "bench" / "attacks.py"
    done = subprocess.run([sys.executable, str(bench), "--quick", "--out", str(out)], env=side_env(src),
                          cwd=src.parent, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"the attacks bench on {src}: {done.stderr[-3000:]}")
    return {row["kind"]: row for row in json.loads((out / "results.json").read_text())["rows"]}


def compare(before: dict, after: dict, keys: list[str]) -> dict:
    """One row: each key before and after, and the names of the reliability counts that moved."""
    row = {}
    for key in keys:
        row[f"{key}_before"], row[f"{key}_after"] = before.get(key), after.get(key)
    moved = sorted(k for k in {**before["reliability"], **after["reliability"]}
                   if before["reliability"].get(k) != after["reliability"].get(k))
    row["reliability_moved"] = ", ".join(f"{k} {before['reliability'].get(k)}->{after['reliability'].get(k)}"
                                         for k in moved) or "none"
    return row


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--before", default="HEAD", help="the git ref of the code before (default: HEAD)")
        parser.add_argument("--attacks", action="store_true", help="also the attacks bench's quick rows on each side")
        parser.add_argument("--repeats", type=int, default=1, help="pairs of default runs, the sides alternating")

    args = parse_args(__doc__.splitlines()[0], "bench/out/parity", options)
    paths = sorted(SCENARIOS.glob("*.yaml"))
    with tempfile.TemporaryDirectory(prefix="echo2-parity-") as scratch:
        worktree = Path(scratch) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.before], cwd=REPO, check=True,
                       capture_output=True)
        try:
            sides = {"before": worktree / "src", "after": REPO / "src"}
            simulated = {name: simulate_side(src, paths) for name, src in sides.items()}
            trained = train_pairs(sides, Path(scratch) / "runs", 100 if args.quick else None, args.repeats)
            attacked = {name: attacks_side(src, Path(scratch) / "attacks" / name) for name, src in sides.items()} \
                if args.attacks else None
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)
    rows = []
    for path, before, after in zip(paths, simulated["before"], simulated["after"], strict=True):
        rows.append({"what": path.stem, **compare(before, after, ["steps", "util", "ratio", "mean_active",
                                                                   "dissemination_s"]),
                     "records_identical": before["records_sha256"] == after["records_sha256"]})
    rows.append({"what": "echo2 train (default)", **compare(trained["before"], trained["after"],
                                                             ["steps", "steps_per_s", "samples_per_s", "accuracy"]),
                 "pace_ratios": trained["pace_ratios"]})
    for kind in sorted(attacked["after"]) if attacked else ():
        before, after = attacked["before"].get(kind, {}), attacked["after"][kind]
        rows.append({"what": f"attack: {kind}", "detected_before": before.get("detected"),
                     "detected_after": after["detected"],
                     "trained_after_before": before.get("attacker_groups_trained_after"),
                     "trained_after_after": after["attacker_groups_trained_after"]})
    columns = ["what", "steps_before", "steps_after", "util_before", "util_after", "ratio_before", "ratio_after",
               "steps_per_s_before", "steps_per_s_after", "samples_per_s_before", "samples_per_s_after",
               "accuracy_before", "accuracy_after", "records_identical", "reliability_moved", "detected_before",
               "detected_after", "trained_after_before", "trained_after_after", "pace_ratios"]
    print(f"before: {args.before} ({git('rev-parse', '--short', args.before)}); after: the working tree")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"before": git("rev-parse", args.before), "quick": args.quick,
                                          "attacks": args.attacks})
    plot(rows, args.out / "parity.png")
    print(f"\nwrote {path} and {args.out / 'parity.png'}")


def plot(rows: list[dict], out: Path) -> None:
    """Each row's figure after over before: the scenarios' cost ratio to the centralized baseline
    and the default run's steps a second (1 = unchanged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(r["what"], r["ratio_after"] / r["ratio_before"]) if "ratio_before" in r
             else (f"{r['what']}: steps/s", r["steps_per_s_after"] / r["steps_per_s_before"])
             for r in rows if "ratio_before" in r or "steps_per_s_before" in r]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(shown) + 1.5))
    ax.barh([name for name, _ in shown], [moved for _, moved in shown], color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("after / before (scenarios: dollars over the centralized baseline's)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
