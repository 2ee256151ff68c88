"""Does the planner time a task with long-tailed responses? Predicted against measured seconds per
version for the co-located baseline and async S = 2 on the network lab.

    python bench/length_lab.py [--quick] [--out DIR] [--steps N] [--cap-mbps M]

The task: SmolLM2-135M on reasoning-gym's chain sums (``configs/smollm2-135m-chain-sum.yaml``) asked
to explain its steps in up to 96 tokens (:data:`TASK`): replies run from a few tokens to the cap,
more than half of them to the cap before training. Three runs, each measured the same way (wall
time per version after the first batch, ``echo2.simulation.calibrate.measured``):

1. **calibration** (held out of every prediction): learner on core 0, two local workers on core 1,
   async S = 1, uncapped loopback; ``echo2 calibrate`` reads the step time, request and fetch costs,
   the run's lengths per trained group, and times the engine's decoding steps against the batch;
2. **co-located** (held out): ``emulation.colocated`` — one worker on the learner's core, sync
   S = 0, generation and training in turn;
3. **async S = 2 on the lab** (held out; root): learner and two workers on hosts of the network lab
   (:mod:`echo2.lab`), every link shaped to ``--cap-mbps`` both ways, workers on core 1.

Each held-out config is predicted by ``echo2 simulate --calibration`` (the mean of 5 seeds; the lab's
links as the emulation's upload caps), twice: with the calibration's lengths and decode curve (a
lease drains as one static batch until its longest reply), and as the planner did before (every
reply at the run's mean rate, lease times spread by the measured coefficient of variation), and
with the curve but every reply at the mean length (``mean_lengths``: what the tails add). The
table gives all three against the measurement, and the co-located over distributed ratio.
``--quick``: the shipped tiny model, 6 steps, replies up to 24 tokens (the lab run only as root).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402
from experiment_arms import CHUNK_MIB, LEARNER_CPUS, WORKER_CPUS, Arm, run_arm  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.planning.calibration import calibrate_run, with_decode_curve  # noqa: E402
from echo2.simulation.calibrate import measured  # noqa: E402
from echo2.simulation.predict import simulated_runs  # noqa: E402

RECIPE = "configs/smollm2-135m-chain-sum.yaml"
TASK = ["task.options.system_prompt=You are a helpful math tutor.",
        "task.options.instruction=Explain your steps briefly, then give the answer.", "rollout.max_new_tokens=96"]
QUICK_TASK = ["rollout.max_new_tokens=24"]
CAP_MBPS = 10.0
"""The lab's links: a LoRA delta version (~2.5 MB) in about two seconds a hop."""
#: (name, overrides, on the lab) of the three runs; the first is the calibration.
RUNS = (
    ("calibration: async S=1, 2 local workers", ["protocol=async", "staleness=1", "workers.count=2",
                                                  f"workers.cpus={WORKER_CPUS}"], False),
    ("co-located: sync S=0", ["emulation.colocated=true", "protocol=sync", "staleness=0"], False),
    ("lab: async S=2, 2 workers", ["protocol=async", "staleness=2"], True),
)


def _options(parser) -> None:
    parser.add_argument("--steps", type=int, default=16, help="learner steps of every run")
    parser.add_argument("--cap-mbps", type=float, default=CAP_MBPS, help="the lab's link rate, both ways")


def settings(quick: bool, steps: int, overrides: list[str]) -> list[str]:
    """Every run's command-line settings: the task, its length, no evaluation or checkpoint on the way."""
    base = QUICK_TASK if quick else ["--config", RECIPE, *TASK]
    return [*base, *overrides, f"run.steps={steps}", "eval.every=100000", "eval.size=10", "eval.show=0",
            "telemetry.progress=false", "telemetry.tensorboard=false", "checkpoint.every=0",
            f"learner.cpus={LEARNER_CPUS}", f"broadcast.chunk_mib={CHUNK_MIB}"]


def as_simulated(quick: bool, steps: int, overrides: list[str], lab: bool, cap: float):
    """The config a run stands for, as the simulator reads it: a lab run's remote workers as two local
    workers whose uplinks, and the learner's, are capped at the lab's rate."""
    config_args = [] if quick else [*TASK]
    extra = ["workers.count=2", f"workers.cpus={WORKER_CPUS}", f"emulation.learner_upload_mbps={cap}",
             f"emulation.worker_upload_mbps={cap}"] if lab else []
    return load_config(None if quick else RECIPE,
                       [*config_args, *overrides, *extra, f"run.steps={steps}", f"broadcast.chunk_mib={CHUNK_MIB}"])


def per_version(results) -> float:
    return statistics.fmean(r.train_wall_s / r.steps for r in results)


def before(calibration):
    """The calibration as the planner read it before lengths were a distribution: each worker at the
    calibration run's measured rate, lease times spread by their measured coefficient of variation."""
    return calibration.model_copy(update={"lengths": [], "decode_fixed_s": None, "decode_per_sequence_s": None})


def at_the_mean(calibration):
    """The calibration with its decode curve but every reply at the measured mean length (what the
    lengths alone add)."""
    mean = statistics.fmean(x for group in calibration.lengths for x in group)
    return calibration.model_copy(update={"lengths": [[mean] * len(group) for group in calibration.lengths]})


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/length_lab", _options)
    steps = 6 if args.quick else args.steps
    out, runs = args.out, args.out / "runs"
    dirs = []
    for index, (name, overrides, lab) in enumerate(RUNS):
        run_dir = runs / f"run-{index}"
        if lab and os.geteuid() != 0:
            print(f"skipping '{name}': the network lab needs root")
            continue
        if not (run_dir / "metrics.jsonl").exists():
            print(f"training '{name}' ...", flush=True)
            run_arm(Arm(name, (), lab=lab, seeds=1), 0, run_dir, settings(args.quick, steps, overrides), args.cap_mbps)
        dirs.append((name, overrides, lab, run_dir))
    (cal_name, cal_overrides, _, cal_dir) = dirs[0]
    calibration = with_decode_curve(calibrate_run(cal_dir), load_config(str(cal_dir / "config.yaml")))
    rows = []
    for name, overrides, lab, run_dir in dirs[1:]:
        real = measured(run_dir)
        config = as_simulated(args.quick, real["steps"], overrides, lab, args.cap_mbps)
        row = {"config": name, "steps": real["steps"], "s_per_version_measured": real["train_wall_s"] / real["steps"],
               "s_per_version_predicted": per_version(simulated_runs(config, calibration, name)),
               "s_per_version_before": per_version(simulated_runs(config, before(calibration), name)),
               "s_per_version_mean_lengths": per_version(simulated_runs(config, at_the_mean(calibration), name)),
               "util_measured": real["utilization"]}
        for key in ("predicted", "before", "mean_lengths"):
            row[f"error_{key}_pct"] = 100 * (row[f"s_per_version_{key}"] / row["s_per_version_measured"] - 1)
        rows.append(row)
    if len(rows) == 2:
        colocated, distributed = rows
        rows.append({"config": "co-located / distributed", **{
            f"s_per_version_{key}": colocated[f"s_per_version_{key}"] / distributed[f"s_per_version_{key}"]
            for key in ("measured", "predicted", "before", "mean_lengths")}})
        for key in ("predicted", "before", "mean_lengths"):
            rows[-1][f"error_{key}_pct"] = 100 * (rows[-1][f"s_per_version_{key}"] / rows[-1]["s_per_version_measured"] - 1)
    lengths = [x for group in calibration.lengths for x in group]
    cap = calibration.max_tokens
    print(f"calibration ({cal_name}): {len(calibration.lengths)} groups, mean reply {statistics.fmean(lengths):.1f} "
          f"tokens, {100 * sum(x >= cap for x in lengths) / len(lengths):.0f}% at the {cap:g}-token cap; decode step "
          f"{1e3 * calibration.decode_fixed_s:.1f} ms + {1e3 * calibration.decode_per_sequence_s:.2f} ms per row")
    print(format_table(rows, ["config", "steps", "util_measured", "s_per_version_measured", "s_per_version_predicted",
                              "error_predicted_pct", "s_per_version_mean_lengths", "error_mean_lengths_pct",
                              "s_per_version_before", "error_before_pct"]))
    path = write_results(out, rows, {"quick": args.quick, "steps": steps, "cap_mbps": args.cap_mbps,
                                     "calibration": calibration.model_dump(mode="json", exclude={"lengths"}),
                                     "mean_reply_tokens": statistics.fmean(lengths),
                                     "capped_share": sum(x >= cap for x in lengths) / len(lengths),
                                     "lengths_per_group": calibration.lengths},
                         models=(calibration.model,))
    print(f"wrote {path}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as error:
        sys.exit(f"a run failed: {error}")
