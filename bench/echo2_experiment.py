"""ECHO-2's central experiment on a real model: distributed workers behind slow links vs the co-located baseline.

    python bench/echo2_experiment.py [--quick] [--out DIR] [--runs FILE] [--arms A,B,...] [--seeds N]
                                     [--minutes M] [--eval-every K] [--summarize]

The SmolLM2-135M recipe (``configs/smollm2-135m-chain-sum.yaml``, LoRA) in the arms of
``bench/experiment_arms.py``: the co-located baseline (``emulation.colocated=true``: one worker on the
learner's own core, generation and training taking turns, S = 0), and distributed runs with the
learner and two workers on hosts of the network lab — sync S = 0, async S = 1, 2, 4, and S = 2 with
a star broadcast instead of the pipelined relay chain. The lab's links are shaped by the kernel so
that one version takes about two learner steps to cross them, from the first co-located run's
learner step time and bytes per version. Prices are declared (``experiment_arms.PRICE_SOURCES``)
and billed by echo2 itself. Every run trains for ``--minutes`` (by default its arm's own: 20, but
45 for sync S = 0, which paces slowest) and is evaluated afterwards
(``eval.where=after``: no evaluation shares the CPUs with training; greedy only, on both cores) every
``--eval-every`` versions on the recipe's 200 held-out prompts, each evaluation timed at its version's
publish.

Runs accumulate: each finished one's record is appended to ``--runs`` (default
``docs/results/echo2-experiment-runs.jsonl``, kept with the code: its commit and machine in every
record; ``OUT/runs.jsonl`` with ``--quick``) and a run on record is not made again, so the seeds of
an arm can be made in several sittings; ``--summarize`` only reads the records. Run directories go
to ``OUT/runs/``. A run's curve is read smoothed, each evaluation as the mean of the last three
(one evaluation of 200 prompts is noisy on its own: a binomial standard error of ~3.5 points); its *plateau* is that
curve's highest point, where it flattens. The target is the co-located runs' plateau (over their
seeds) less 2 points, reached when the smoothed curve first gets there; per arm: time and dollars
to the target, plateau and final accuracy (the last three evaluations), mean and 95% interval over
seeds (Student's t), against sync S = 0 and the baseline. Plots: held-out accuracy against wall time and against dollars (mean and band over
seeds), learner utilization, staleness of the trained groups. ``--quick``: the shipped tiny model,
6 steps, one seed of the baseline and of async S = 2 (the lab arm needs root).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
from common import format_table, write_results  # noqa: E402
from experiment_arms import ARMS, BY_NAME, LEARNER_PRICE, PRICE_SOURCES, WORKER_PRICE, Arm, overrides, record, run_arm  # noqa: E402

RUNS = Path(__file__).parent.parent / "docs" / "results" / "echo2-experiment-runs.jsonl"
TRANSFER_STEPS = 2.0
"""A capped link carries one version in about this many learner steps."""


def _options(parser) -> None:
    parser.add_argument("--arms", default=None, help="comma-separated arms to run (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per arm (default: each arm's own)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="run.max_minutes of every run (default: each arm's own, 20 but sync S = 0's 45)")
    parser.add_argument("--eval-every", type=int, default=10, help="evaluate every this many versions (quick: 3)")
    parser.add_argument("--runs", type=Path, default=None, help="the runs' records (JSON lines; default "
                        "docs/results/echo2-experiment-runs.jsonl, with --quick OUT/runs.jsonl)")
    parser.add_argument("--summarize", action="store_true", help="only summarize the runs already recorded")


def interval(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and half-width of its 95% Student-t interval (None without two values; both without one)."""
    return common.mean_ci95(values) if values else (None, None)


SMOOTHING = 3
"""Evaluations averaged into one point of a smoothed curve (the point's own and those before it)."""


def smoothed(points: list[list[float]]) -> list[tuple[float, float, float]]:
    """(seconds, dollars, mean accuracy of this evaluation and up to ``SMOOTHING - 1`` before it)."""
    return [(t, dollars, statistics.fmean(p[2] for p in points[max(0, i + 1 - SMOOTHING):i + 1]))
            for i, (t, dollars, _) in enumerate(points)]


def plateau(points: list[list[float]]) -> float:
    """Where a run's curve flattens: the highest point of its smoothed curve."""
    return max(accuracy for _, _, accuracy in smoothed(points))


EVAL_EVERY = 10
"""Versions between evaluations in the runs recorded before their records listed the versions."""


def eval_versions(run: dict) -> list[int]:
    """The version each of ``run``'s evaluations evaluated. Older records do not list them: those
    runs were evaluated every :data:`EVAL_EVERY` versions from v0 and at their last version."""
    if "eval_versions" in run:
        return run["eval_versions"]
    versions = [min(EVAL_EVERY * i, run["steps"]) for i in range(len(run["points"]))]
    if versions[-1] != run["steps"] or len(set(versions)) != len(versions):
        raise ValueError(f"the {run['arm']} seed {run['seed']} record lists {len(run['points'])} evaluations, not "
                         f"one every {EVAL_EVERY} versions of its {run['steps']}: record its eval_versions")
    return versions


def reached(run: dict, target: float) -> tuple[float | None, float | None, int | None]:
    """Seconds, dollars and versions to the first point of ``run``'s smoothed curve at or above
    ``target`` (None: never). Seconds are versions times the run's pace: the split says whether an
    arm is slower to the target because it learns less per version or because it makes fewer."""
    return next(((t, dollars, version) for (t, dollars, accuracy), version
                 in zip(smoothed(run["points"]), eval_versions(run)) if accuracy >= target), (None, None, None))


def seconds_per_version(run: dict) -> float:
    """The run's pace: its learner's wall time per version (a machine's, like its seconds)."""
    return run["train_wall_s"] / run["steps"]


def training_minutes(arm: Arm, override: float | None) -> float:
    """``--minutes`` when given, else the arm's own."""
    return arm.minutes if override is None else override


def load_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def link_cap(records: list[dict]) -> float:
    """Mbit/s at which one version takes :data:`TRANSFER_STEPS` learner steps (first co-located run)."""
    base = next((r for r in records if r["arm"] == "colocated"), None)
    if base is None:
        raise SystemExit("no co-located run on record: its learner step and version size size the lab's links")
    return 8 * base["bytes_per_version"] / (TRANSFER_STEPS * base["learner_step_s"]) / 1e6


def run_missing(args, records: list[dict], runs_file: Path) -> list[dict]:
    names = args.arms.split(",") if args.arms else [arm.name for arm in ARMS]
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        raise SystemExit(f"unknown arms {unknown}: choose from {[arm.name for arm in ARMS]}")
    if args.quick:
        names = ["colocated", "async-S2"] if os.geteuid() == 0 else ["colocated"]
    for arm in sorted((BY_NAME[name] for name in names), key=lambda arm: arm.lab):  # the baseline first: the cap
        for seed in range(1 if args.quick else args.seeds or arm.seeds):
            if any(r["arm"] == arm.name and r["seed"] == seed for r in records):
                continue
            cap = link_cap(records) if arm.lab else None
            print(f"== {arm.name} seed {seed}" + (f" ({cap:.3g} Mbit/s links)" if cap else ""), flush=True)
            run_dir = args.out / "runs" / f"{arm.name}-seed{seed}"
            minutes = training_minutes(arm, args.minutes)
            run_arm(arm, seed, run_dir, overrides(arm, seed, minutes, args.eval_every, args.quick), cap)
            records.append({**record(arm, seed, run_dir), "cap_mbps": cap, "minutes": minutes,
                            **common.provenance()})
            with runs_file.open("a") as out:
                out.write(json.dumps(records[-1]) + "\n")
    return records


def summarize(records: list[dict]) -> tuple[list[dict], float]:
    base_plateaus = [plateau(r["points"]) for r in records if r["arm"] == "colocated"]
    if not base_plateaus:
        raise SystemExit("no co-located run on record: the target is the baseline's plateau (run its arm)")
    target = statistics.fmean(base_plateaus) - 0.02
    rows = []
    for arm in ARMS:
        runs = [r for r in records if r["arm"] == arm.name]
        if not runs:
            continue
        hits = [reached(r, target) for r in runs]
        seconds = interval([t for t, _, _ in hits if t is not None])
        dollars = interval([d for _, d, _ in hits if d is not None])
        versions = interval([v for _, _, v in hits if v is not None])
        final, peak = interval([r["acc_final"] for r in runs]), interval([plateau(r["points"]) for r in runs])
        rows.append({"arm": arm.name, "seeds": len(runs), "reached": sum(t is not None for t, _, _ in hits),
                     "time_to_target_s": seconds[0], "time_ci_s": seconds[1], "dollars_to_target": dollars[0],
                     "dollars_ci": dollars[1], "versions_to_target": versions[0], "versions_to_target_ci": versions[1],
                     "acc_plateau": peak[0], "acc_plateau_ci": peak[1],
                     "acc_final": final[0], "acc_final_ci": final[1],
                     "utilization": statistics.fmean(r["utilization"] for r in runs),
                     "samples_per_s": statistics.fmean(r["samples_per_s"] for r in runs),
                     "dollars_per_hour": statistics.fmean(r["dollars_per_hour"] for r in runs),
                     "steps": statistics.fmean(r["steps"] for r in runs)})

    def time_to(run: dict) -> float | None:
        return reached(run, target)[0]

    def dollars_to(run: dict) -> float | None:
        return reached(run, target)[1]

    for row in rows:
        runs = [r for r in records if r["arm"] == row["arm"]]
        for other, key, measure in (("sync-S0", "time_vs_sync", time_to), ("async-S2", "time_vs_async_S2", time_to),
                                    ("colocated", "time_vs_colocated", time_to),
                                    ("colocated", "dollars_vs_colocated", dollars_to),
                                    ("colocated", "pace_vs_colocated", seconds_per_version)):
            row[key], row[f"{key}_ci"] = interval(same_machine_ratios(runs, records, other, measure))
    return rows, target


def same_machine_ratios(runs: list[dict], records: list[dict], other: str,
                        measure: Callable[[dict], float | None]) -> list[float]:
    """Each run's ``measure`` (seconds or dollars to the target, seconds per version) over the mean
    of ``other``'s runs' **on the same machine** (a run's pace is its processor's: machines of one
    kind differ by up to 2x, so a ratio across two would measure the machines, not the arms)."""
    ratios = []
    for run in runs:
        mine = measure(run)
        theirs = [measure(r) for r in records if r["arm"] == other and r.get("machine") == run.get("machine")]
        theirs = statistics.fmean(met) if (met := [value for value in theirs if value is not None]) else 0.0
        if mine is not None and theirs > 0:  # no ratio to a target never met, or met at the start
            ratios.append(mine / theirs)
    return ratios


def plot(records: list[dict], rows: list[dict], target: float, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for column, (axis, label) in enumerate(((axes[0][0], "wall time since the first step (s)"),
                                            (axes[0][1], "dollars billed (declared prices)"))):
        for row in rows:
            runs = [r for r in records if r["arm"] == row["arm"]]
            end = min(max(p[column] for p in r["points"]) for r in runs)
            grid = [end * i / 60 for i in range(61)]
            curves = [[[p[2] for p in smoothed(r["points"]) if p[column] <= x][-1] for x in grid]
                      for r in runs]  # the smoothed curve's last point by then
            mean = [statistics.fmean(c[i] for c in curves) for i in range(len(grid))]
            line, = axis.plot(grid, mean, label=f"{row['arm']} ({len(runs)} seed{'s' * (len(runs) > 1)})")
            if len(runs) > 1:
                axis.fill_between(grid, [min(c[i] for c in curves) for i in range(len(grid))],
                                  [max(c[i] for c in curves) for i in range(len(grid))], alpha=0.15,
                                  color=line.get_color())
        axis.axhline(target, color="grey", linestyle=":", label=f"target {target:.1%}")
        axis.set_xlabel(label)
        axis.set_ylabel(f"held-out greedy accuracy (mean of the last {SMOOTHING} evaluations)")
        axis.legend(fontsize=7)
    axes[1][0].bar([row["arm"] for row in rows], [row["utilization"] for row in rows])
    axes[1][0].set_ylabel("learner utilization")
    axes[1][0].tick_params(axis="x", labelrotation=30, labelsize=8)
    for row in rows:
        counts: dict[int, float] = {}
        for r in (r for r in records if r["arm"] == row["arm"]):
            for staleness, count in r["staleness"].items():
                counts[int(staleness)] = counts.get(int(staleness), 0) + count
        total = sum(counts.values()) or 1
        axes[1][1].plot(sorted(counts), [counts[k] / total for k in sorted(counts)], "o-", label=row["arm"])
    axes[1][1].set_xlabel("staleness of a trained group (learner version - generating version - 1)")
    axes[1][1].set_ylabel("share of trained groups")
    axes[1][1].legend(fontsize=7)
    fig.tight_layout()
    path = out / "echo2-experiment.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/echo2-experiment", _options)
    args.eval_every = 3 if args.quick else args.eval_every
    args.out.mkdir(parents=True, exist_ok=True)
    runs_file = args.runs or (args.out / "runs.jsonl" if args.quick else RUNS)
    records = load_records(runs_file)
    if not args.summarize:
        records = run_missing(args, records, runs_file)
    rows, target = summarize(records)
    columns = ["arm", "seeds", "reached", "time_to_target_s", "time_ci_s", "time_vs_sync", "time_vs_async_S2",
               "time_vs_colocated", "time_vs_colocated_ci", "versions_to_target", "versions_to_target_ci",
               "pace_vs_colocated", "dollars_to_target", "dollars_ci", "dollars_vs_colocated",
               "dollars_vs_colocated_ci", "acc_plateau", "acc_plateau_ci", "acc_final", "acc_final_ci", "utilization",
               "samples_per_s", "dollars_per_hour", "steps"]
    print(f"\ntarget {target:.3f} (the co-located runs' plateau less 2 points); prices: learner "
          f"${LEARNER_PRICE}/h, worker ${WORKER_PRICE}/h ({PRICE_SOURCES['learner']}; {PRICE_SOURCES['worker']})")
    print(format_table(rows, columns))
    machines = Counter(r.get("machine", "machine not recorded") for r in records)
    print("runs by machine (pace compares only within one): " + "; ".join(f"{m}: {n}" for m, n in machines.items()))
    caps = sorted({r["cap_mbps"] for r in records if r.get("cap_mbps")})
    meta = {"quick": args.quick, "target_accuracy": target, "prices": {"learner_per_hour": LEARNER_PRICE,
            "worker_per_hour": WORKER_PRICE, "sources": PRICE_SOURCES}, "link_cap_mbps": caps,
            "transfer_steps": TRANSFER_STEPS, "eval_every": args.eval_every,
            "minutes": {arm.name: training_minutes(arm, args.minutes) for arm in ARMS},
            "runs": [{k: v for k, v in r.items() if k != "points"} for r in records]}
    models = ("echo2/tiny-arith",) if args.quick else ("smollm2-135m-instruct",)
    print(f"wrote {write_results(args.out, rows, meta, models)} and {plot(records, rows, target, args.out)}")


if __name__ == "__main__":
    main()
