"""Learning fidelity on the real model: the staleness correction at S = 8, and GRPO vs GRPO+EchoClip.

    python bench/real_fidelity.py [--quick] [--out DIR] [--runs FILE] [--rows correction,echoclip] [--seeds N]
                                  [--device cpu|cuda] [--jobs N] [--summarize]

The SmolLM2-135M recipe (LoRA) on this host: the learner on CPU 0, two workers on CPU 1
(``experiment_arms.LEARNER_CPUS``, ``WORKER_CPUS``), evaluated after training every 10 versions on
the 200 held-out prompts (greedy, as ``bench/echo2_experiment.py`` does). ``--device cuda`` puts the
learner, the workers and the evaluator of each run on the GPU instead (no CPU pinning), and
``--jobs N`` makes N runs at once (a GPU host's cores and card hold several of these small runs;
on a 2-core host keep 1). The rows compare settings, so each row's runs belong on one machine:
every record names its machine and device. Short runs, by steps:
most of the recipe's gain comes in its first 40 steps, which is where a correction that fails or an
auxiliary loss that helps shows.

**correction** (3 seeds each): ``learner.correction`` none / truncated / decoupled at S = 8 (async).
Here generation is the slow side (a worker's core makes ~10 samples/s, the learner trains ~20), so
S = 8 would stay nearly on-policy; each step therefore makes 4 PPO epochs of 2 minibatches
(``learner.epochs=4``, ``learner.minibatches=2``, AReaL's and PPO's several updates per batch):
the learner becomes the slow side, the workers fill the staleness window and the trained groups
are about 8 versions old — the setting the correction is for, and one where PPO's clip binds
(the decoupled objective's clip acts only over several updates). 50 steps.

**echoclip** (5 seeds, paired by seed: the same prompts and initial state): GRPO vs GRPO+EchoClip
(``learner.echoclip.enabled``) at the recipe's async S = 1. chain_sum's answers are one number of
one to three digits and no worked steps, so EchoClip's *step* is a token
(``learner.echoclip.step_delimiters=[]``): the clip of an all-correct group's rollout ends at its
highest-entropy token (the uncertain digit), and the auxiliary loss trains that prefix. 40 steps.

Runs accumulate in ``--runs`` (default ``docs/results/real-fidelity-runs.jsonl``: commit, machine and
device in each record) and a run on record for this device is not made again. Each row compares
its settings on one device, its newest run's; runs of another device stay on record, listed in the
results as set aside. Rows: final held-out accuracy (mean of the
last three evaluations) per setting, mean and 95% Student-t interval over seeds, and the
difference against truncated (correction; unpaired, Welch's interval) or GRPO (EchoClip; paired by
seed), with its 95% interval, whichever way it falls; and the rows a run's steps left out as
implausible (``implausible_rows``), also as a share of the rows with a learning signal it updated
on (``left_out_share``; ``trained_sequences``, per run: the arms of a row update on different
numbers of rows). ``--quick``: the shipped tiny model, 4 steps, one seed of GRPO and of
GRPO+EchoClip.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
from common import format_table, write_results  # noqa: E402
from experiment_arms import WORKER_CPUS, Arm, overrides, record, run_arm  # noqa: E402

RUNS = Path(__file__).parent.parent / "docs" / "results" / "real-fidelity-runs.jsonl"
LOCAL = ("protocol=async", "workers.count=2")
PLACEMENT = {"cpu": (f"workers.cpus={WORKER_CPUS}",),
             "cuda": ("learner.device=cuda", "workers.device=cuda", "learner.cpus=null", "eval.cpus=null")}
"""Where a run's processes go, after :func:`experiment_arms.overrides` (which pins the CPUs)."""
SETTINGS = {
    "correction": [Arm(f"S8-{correction}", (*LOCAL, "staleness=8", f"learner.correction={correction}",
                                            "learner.epochs=4", "learner.minibatches=2"), lab=False, seeds=3)
                   for correction in ("none", "truncated", "decoupled")],
    "echoclip": [Arm(name, (*LOCAL, "staleness=1", f"learner.echoclip.enabled={enabled}",
                            "learner.echoclip.step_delimiters=[]"), lab=False, seeds=5)
                 for name, enabled in (("grpo", "false"), ("grpo+echoclip", "true"))],
}
STEPS = {"correction": 50, "echoclip": 40}
BASELINE = {"correction": "S8-truncated", "echoclip": "grpo"}
"""What each row's difference is measured against."""


def _options(parser) -> None:
    parser.add_argument("--rows", default="correction,echoclip", help="comma-separated: correction, echoclip")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per setting (default: each row's own)")
    parser.add_argument("--runs", type=Path, default=None, help="the runs' records (JSON lines; default "
                        "docs/results/real-fidelity-runs.jsonl, with --quick OUT/runs.jsonl)")
    parser.add_argument("--summarize", action="store_true", help="only summarize the runs already recorded")
    parser.add_argument("--device", choices=sorted(PLACEMENT), default="cpu",
                        help="where each run's learner, workers and evaluator run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")


def device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return f"cuda ({torch.cuda.get_device_name()})"


def run_missing(args, records: list[dict], runs_file: Path) -> list[dict]:
    """Make every run not on record for this device, ``args.jobs`` at a time, appending each record
    as it finishes."""
    todo, device, lock = [], device_name(args.device), threading.Lock()
    for row in ["echoclip"] if args.quick else args.rows.split(","):
        if row not in SETTINGS:
            raise SystemExit(f"unknown row {row!r}: choose from {sorted(SETTINGS)}")
        todo += [(row, arm, seed) for arm in SETTINGS[row] for seed in range(1 if args.quick else args.seeds or arm.seeds)
                 if not any(r["arm"] == arm.name and r["seed"] == seed and run_device(r) == device
                            for r in records)]
    todo.sort(key=lambda job: job[2])  # seed by seed: a run cut short leaves whole seeds of every setting

    def run(row: str, arm: Arm, seed: int) -> None:
        print(f"== {arm.name} seed {seed}", flush=True)
        run_dir = args.out / "runs" / f"{arm.name}-seed{seed}"
        steps = 4 if args.quick else STEPS[row]
        settings = [*overrides(arm, seed, 60, 2 if args.quick else 10, args.quick), *PLACEMENT[args.device],
                    f"run.steps={steps}"]
        run_arm(arm, seed, run_dir, settings, None)
        done = {**record(arm, seed, run_dir), "row": row, **common.provenance(), "device": device}
        with lock:
            records.append(done)
            with runs_file.open("a") as out:
                out.write(json.dumps(done) + "\n")
        print(f"== {arm.name} seed {seed}: final {done['acc_final']:.3f} after {done['steps']} steps", flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for finished in [pool.submit(run, *job) for job in todo]:
            finished.result()
    return records


def welch_ci95(a: list[float], b: list[float]) -> float | None:
    """Half-width of the 95% interval of mean(a) - mean(b) (Welch; None without two of each)."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb else len(a) + len(b) - 2
    return common.t975(df) * (va + vb) ** 0.5


def _mean_of(runs: dict[int, dict], value) -> float | None:
    """Mean of ``value`` over the runs whose records have it (older records lack the newer fields)."""
    values = []
    for run in runs.values():
        try:
            values.append(value(run))
        except KeyError:
            pass
    return statistics.fmean(values) if values else None


def run_device(record: dict) -> str:
    """The device a run on record ran on (records from before devices were recorded: the CPU)."""
    return record.get("device", "cpu")


def row_device(records: list[dict], row: str) -> str | None:
    """The one device a row's runs are compared on: the device of its newest run (None if it has
    none). Its settings compare only on one machine and device, so a row never pools runs of
    two; the runs of another device stay on record, listed as set aside."""
    devices = [run_device(r) for r in records if r["row"] == row]
    return devices[-1] if devices else None


def summarize(records: list[dict]) -> list[dict]:
    rows = []
    for row, arms in SETTINGS.items():
        device = row_device(records, row)
        records_of_row = [r for r in records if r["row"] == row and run_device(r) == device]
        base = {r["seed"]: r for r in records_of_row if r["arm"] == BASELINE[row]}
        for arm in arms:
            runs = {r["seed"]: r for r in records_of_row if r["arm"] == arm.name}
            if not runs:
                continue
            final, final_ci = common.mean_ci95([r["acc_final"] for r in runs.values()])
            staleness = [int(k) for r in runs.values() for k, n in r["staleness"].items() for _ in range(n)]
            out = {"row": row, "setting": arm.name, "seeds": len(runs), "device": device,
                   "steps": statistics.fmean(r["steps"] for r in runs.values()),
                   "acc_start": statistics.fmean(r["acc_start"] for r in runs.values()),
                   "acc_final": final, "acc_final_ci": final_ci, "staleness_mean": statistics.fmean(staleness),
                   "echoclip_tokens_per_step": _mean_of(runs, lambda r: r["echoclip_tokens"] / r["steps"]),
                   "implausible_rows": _mean_of(runs, lambda r: r["implausible_rows"]),
                   "left_out_share": _mean_of(runs, lambda r: r["implausible_rows"] / r["trained_sequences"]),
                   "trained_sequences": _mean_of(runs, lambda r: r["trained_sequences"])}
            if arm.name != BASELINE[row] and base:
                if row == "echoclip":  # paired by seed
                    diffs = [runs[s]["acc_final"] - base[s]["acc_final"] for s in sorted(runs.keys() & base.keys())]
                    out["vs_baseline_points"], ci = common.mean_ci95(diffs) if diffs else (None, None)
                    out["vs_baseline_ci_points"], out["pairs"] = ci, len(diffs)
                else:
                    mine, theirs = [r["acc_final"] for r in runs.values()], [r["acc_final"] for r in base.values()]
                    out["vs_baseline_points"] = statistics.fmean(mine) - statistics.fmean(theirs)
                    out["vs_baseline_ci_points"] = welch_ci95(mine, theirs)
                for key in ("vs_baseline_points", "vs_baseline_ci_points"):
                    out[key] = None if out[key] is None else 100 * out[key]
            rows.append(out)
    return rows


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/real-fidelity", _options)
    args.out.mkdir(parents=True, exist_ok=True)
    runs_file = args.runs or (args.out / "runs.jsonl" if args.quick else RUNS)
    records = [json.loads(line) for line in runs_file.read_text().splitlines()] if runs_file.exists() else []
    if not args.summarize:
        records = run_missing(args, records, runs_file)
    rows = summarize(records)
    devices = {row: row_device(records, row) for row in SETTINGS}
    print(format_table(rows, ["row", "setting", "seeds", "device", "steps", "acc_start", "acc_final", "acc_final_ci",
                              "staleness_mean", "echoclip_tokens_per_step", "implausible_rows", "left_out_share",
                              "trained_sequences", "vs_baseline_points", "vs_baseline_ci_points"]))
    meta = {"quick": args.quick, "steps": STEPS, "baseline": BASELINE,
            # where and on what code the runs ran (the oldest run's commit), not where they were summarized
            "machine": " + ".join(sorted({f"{r['machine']}, {run_device(r)}" for r in records})) or None,
            "commit": records[0]["commit"] if records else None,
            "commits": sorted({r["commit"] for r in records}),
            "settings": {arm.name: list(arm.overrides) for arms in SETTINGS.values() for arm in arms},
            "runs": [{k: v for k, v in r.items() if k != "points"} for r in records],
            "set_aside": [{"row": r["row"], "arm": r["arm"], "seed": r["seed"], "device": run_device(r)}
                          for r in records if run_device(r) != devices[r["row"]]]}
    models = ("echo2/tiny-arith",) if args.quick else ("smollm2-135m-instruct",)
    print(f"wrote {write_results(args.out, rows, meta, models)}")


if __name__ == "__main__":
    main()
