"""The calibration run and the held-out configurations that bench/capacity.py and bench/simulator.py predict.

Every run pins the learner (and the coordinator in its process) to CPU 0 and the local workers to
CPU 1 (``learner.cpus``, ``workers.cpus``), so that each side's speed does not depend on how busy
the other is: on a machine of its own each would not. Emulated devices are slower than one core
(``throughput_factor`` < 1) and take their generation's CPU time / factor per lease, so workers
sharing CPU 1 keep their speeds. Every run trains two epochs per batch (``learner.epochs=2``:
a learner step slow enough that this machine's worker core can keep up with it), ships whole
versions (``broadcast.encoding=full``: the size of a delta depends on which version a worker
holds), and leaves cost-aware activation off (the fleet is the config's).

The calibration (``echo2 calibrate``'s measurements, :mod:`echo2.planning.calibration`) runs one
configuration; no held-out configuration shares its fleet, and they span the three regimes:
learner-bound (the fleet keeps up, S absorbs dissemination), generation-bound (too little rollout
throughput) and dissemination-bound (capped uplinks: a version takes several learner steps).

Each held-out configuration is trained ``--repeats`` times (3; 1 with ``--quick``), in rounds over
all of them: the same configuration measured twice on this shared machine has differed by up to
20% in seconds per step (one run's generation rate has a standard deviation of about 8.5%), so a
row's figures are the mean of its runs and ``step_s_spread_pct`` shows how far apart they lay. The calibration configuration runs at the start of every round and
halfway through it (``CALIBRATIONS_PER_ROUND``), and the calibration is pooled over those runs
(:func:`pooled`): a single calibration run taken in a fast (or slow) phase of the machine was
measured 20% off every held-out row after it, an error of the machine's, not of the model's. The
calibration stays one configuration, none of the held-out ones.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from common import parse_args

from echo2.config import Config, load_config
from echo2.planning.calibration import Calibration, calibrate_run
from echo2.telemetry.metrics import read_jsonl

COMMON = ["learner.cpus=[0]", "workers.cpus=[1]", "learner.epochs=2", "broadcast.encoding=full",
          "activation.enabled=false", "eval.every=100000", "eval.size=20", "eval.show=0", "telemetry.progress=false",
          "telemetry.tensorboard=false", "checkpoint.every=0"]


def fleet(*factors: float) -> list[str]:
    """Overrides for a local fleet of one worker per factor."""
    entries = ", ".join(f"{{throughput_factor: {f}}}" for f in factors)
    return [f"workers.count={len(factors)}", f"emulation.fleet=[{entries}]"]


CALIBRATION = ("calibration: async S=1, 2 x 0.25", ["protocol=async", "staleness=1", *fleet(0.25, 0.25)])

HELD_OUT = [
    ("sync, 2 x 0.5", "generation", ["protocol=sync", *fleet(0.5, 0.5)]),
    ("async S=1, 2 x 0.5", "learner", ["staleness=1", *fleet(0.5, 0.5)]),
    ("async S=2, 3 x 0.3", "learner", ["staleness=2", *fleet(0.3, 0.3, 0.3)]),
    ("async S=1, 1 x 0.3", "generation", ["staleness=1", *fleet(0.3)]),
    ("async S=4, 4 x 0.1", "generation", ["staleness=4", *fleet(0.1, 0.1, 0.1, 0.1)]),
    ("async S=2, 0.15 + 0.3 + 0.45", "learner", ["staleness=2", *fleet(0.15, 0.3, 0.45)]),
    ("async S=1, uplinks 4 Mbit/s", "dissemination", ["staleness=1", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=4",
                                                      "emulation.learner_upload_mbps=4"]),
    ("async S=2, uplinks 8 Mbit/s", "dissemination", ["staleness=2", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=8",
                                                      "emulation.learner_upload_mbps=8"]),
    ("sync, star, learner uplink 16 Mbit/s", "dissemination", ["protocol=sync", *fleet(0.5, 0.5),
                                                               "broadcast.mode=star",
                                                               "emulation.learner_upload_mbps=16"]),
    ("pull S=1, 2 x 0.5", "generation", ["protocol=pull", "staleness=1", *fleet(0.5, 0.5)]),
    # added with the C / S uplink bound (echo2.planning.capacity) as its test; the two stars then
    # showed the saturated star's fetch grid, which the five rows after them test
    ("async S=1, star, learner uplink 8 Mbit/s", "dissemination", ["staleness=1", *fleet(0.5, 0.5),
                                                                   "broadcast.mode=star",
                                                                   "emulation.learner_upload_mbps=8"]),
    ("async S=2, star, learner uplink 12 Mbit/s", "dissemination", ["staleness=2", *fleet(0.5, 0.5),
                                                                    "broadcast.mode=star",
                                                                    "emulation.learner_upload_mbps=12"]),
    ("async S=2, uplinks 4 Mbit/s", "dissemination", ["staleness=2", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=4",
                                                      "emulation.learner_upload_mbps=4"]),
    ("async S=3, uplinks 6 Mbit/s", "dissemination", ["staleness=3", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=6",
                                                      "emulation.learner_upload_mbps=6"]),
    ("async S=1, star, learner uplink 12 Mbit/s", "dissemination", ["staleness=1", *fleet(0.5, 0.5),
                                                                    "broadcast.mode=star",
                                                                    "emulation.learner_upload_mbps=12"]),
    ("async S=3, star, learner uplink 8 Mbit/s", "dissemination", ["staleness=3", *fleet(0.5, 0.5),
                                                                   "broadcast.mode=star",
                                                                   "emulation.learner_upload_mbps=8"]),
    ("async S=2, star, 3 x 0.3, learner uplink 16 Mbit/s", "dissemination", ["staleness=2", *fleet(0.3, 0.3, 0.3),
                                                                             "broadcast.mode=star",
                                                                             "emulation.learner_upload_mbps=16"]),
    ("async S=2, uplinks 6 Mbit/s", "dissemination", ["staleness=2", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=6",
                                                      "emulation.learner_upload_mbps=6"]),
    ("async S=1, uplinks 6 Mbit/s", "dissemination", ["staleness=1", *fleet(0.5, 0.5), "emulation.worker_upload_mbps=6",
                                                      "emulation.learner_upload_mbps=6"]),
    # added with the star's mean grid wait C / 2 (echo2.planning.capacity) as its test
    ("async S=2, star, learner uplink 8 Mbit/s", "dissemination", ["staleness=2", *fleet(0.5, 0.5),
                                                                   "broadcast.mode=star",
                                                                   "emulation.learner_upload_mbps=8"]),
    ("async S=4, star, learner uplink 6 Mbit/s", "dissemination", ["staleness=4", *fleet(0.5, 0.5),
                                                                   "broadcast.mode=star",
                                                                   "emulation.learner_upload_mbps=6"]),
    ("async S=1, star, 3 x 0.3, learner uplink 16 Mbit/s", "dissemination", ["staleness=1", *fleet(0.3, 0.3, 0.3),
                                                                             "broadcast.mode=star",
                                                                             "emulation.learner_upload_mbps=16"]),
    ("async S=2, star, 3 x 0.25, learner uplink 24 Mbit/s", "dissemination", ["staleness=2",
                                                                              *fleet(0.25, 0.25, 0.25),
                                                                              "broadcast.mode=star",
                                                                              "emulation.learner_upload_mbps=24"]),
    # added with relay trees simulated fetch by fetch (echo2.simulation.fetching) as its test
    ("async S=2, 3-worker chain, uplinks 8 Mbit/s", "dissemination", ["staleness=2", *fleet(0.3, 0.3, 0.3),
                                                                      "emulation.worker_upload_mbps=8",
                                                                      "emulation.learner_upload_mbps=8"]),
    ("async S=2, binary tree, 3 x 0.3, uplinks 12 Mbit/s", "dissemination", ["staleness=2", *fleet(0.3, 0.3, 0.3),
                                                                             "broadcast.fan_out=2",
                                                                             "emulation.worker_upload_mbps=12",
                                                                             "emulation.learner_upload_mbps=12"]),
    ("async S=1, binary tree, 3 x 0.3, uplinks 8 Mbit/s", "dissemination", ["staleness=1", *fleet(0.3, 0.3, 0.3),
                                                                            "broadcast.fan_out=2",
                                                                            "emulation.worker_upload_mbps=8",
                                                                            "emulation.learner_upload_mbps=8"]),
    # added with echo2 plan predicting capped relay chains of more than two and relay trees by simulation
    # (echo2.simulation.predict); predicted in the commit that added them, before they ran
    ("async S=1, 4-worker chain, 4 x 0.25, uplinks 6 Mbit/s", "dissemination", ["staleness=1",
                                                                                *fleet(0.25, 0.25, 0.25, 0.25),
                                                                                "emulation.worker_upload_mbps=6",
                                                                                "emulation.learner_upload_mbps=6"]),
    ("async S=3, binary tree, 5 x 0.2, uplinks 8 Mbit/s", "dissemination", ["staleness=3",
                                                                            *fleet(0.2, 0.2, 0.2, 0.2, 0.2),
                                                                            "broadcast.fan_out=2",
                                                                            "emulation.worker_upload_mbps=8",
                                                                            "emulation.learner_upload_mbps=8"]),
    ("async S=2, 3-ary tree, 4 x 0.25, uplinks 10 Mbit/s", "dissemination", ["staleness=2",
                                                                             *fleet(0.25, 0.25, 0.25, 0.25),
                                                                             "broadcast.fan_out=3",
                                                                             "emulation.worker_upload_mbps=10",
                                                                             "emulation.learner_upload_mbps=10"]),
    ("async S=1, 3-worker chain, 0.5 + 0.25 + 0.25, uplinks 12 Mbit/s", "dissemination", [
        "staleness=1", *fleet(0.5, 0.25, 0.25), "emulation.worker_upload_mbps=12", "emulation.learner_upload_mbps=12"]),
]


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "=." else "_" for c in name).strip("_")


def config_for(overrides: list[str], steps: int, out: Path, name: str) -> Config:
    return load_config(overrides=[*overrides, *COMMON, f"run.steps={steps}", f"run.dir={out / 'runs'}",
                                  f"run.name={slug(name)}"])


def machine_probe_s() -> float:
    """Seconds of a fixed piece of the runs' own work, single-threaded (best of 3): the shipped
    model's forward and backward pass on a fixed batch, 10 times. A shared virtual machine's speed
    drifts (memory and cache contention from its neighbours slow this small, overhead-bound model
    far more than a compute-bound probe shows); a prediction holds for the speed the calibration
    saw, so every row reports the ratio of the probes around it to the calibration's."""
    import time

    import torch

    from echo2.model.loading import load_model
    from echo2.model.sources import SHIPPED_MODEL

    torch.set_num_threads(1)
    model = load_model(SHIPPED_MODEL)  # every run's model (the default)
    tokens = torch.randint(0, model.config.vocab_size, (16, 24), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(10):
            model(input_ids=tokens, labels=tokens).loss.backward()
        best = min(best, time.perf_counter() - started)
    return best


def run(overrides: list[str], steps: int, out: Path, name: str) -> Path:
    """Train one configuration for real; its run directory (reused when ``out`` already holds it),
    with the machine probe taken just before in ``probe.json``."""
    from echo2.launch.train import run_training

    done = sorted((out / "runs").glob(f"{slug(name)}/summary.txt"))
    if done:
        return done[-1].parent
    print(f"== {name}", flush=True)
    before = machine_probe_s()
    run_dir = run_training(config_for(overrides, steps, out, name)).run_dir
    (run_dir / "probe.json").write_text(json.dumps({"workload_probe_s": [before, machine_probe_s()]}))
    return run_dir


def run_name(name: str, index: int) -> str:
    """The name of a configuration's ``index``-th run, counted from 0 (the first keeps the plain
    name; the calibration runs several times a round)."""
    return name if index == 0 else f"{name} (run {index + 1})"


#: Calibration runs per round: one at its start and one halfway through it. A run's learner step
#: differs from another run's of the same configuration by up to 7% on this shared machine (the 62
#: runs of 2026-11-26: 0.59-0.70 s a step at steps 10-40, standard deviation 3.5%, only weakly
#: related to the machine probe, correlation 0.3; run side by side, the calibration's fleet and a
#: learner-bound one trained equally fast), and a calibration pooled over two runs carries half
#: that variance into every prediction; over four runs, a quarter.
CALIBRATIONS_PER_ROUND = 2


def run_all(configs: list, steps: int, out: Path, repeats: int) -> tuple[list[Path], dict[str, list[Path]]]:
    """The calibration's run directories (``CALIBRATIONS_PER_ROUND`` per round, each twice as long
    as a held-out run: its figures carry into every prediction) and every held-out configuration's
    ``repeats`` run directories, trained in rounds (all configurations, then all again, the
    calibration interleaved) so that a drift of the machine's speed spreads over every
    configuration and over the calibration instead of falling on a few."""
    calibration_name, calibration_overrides = CALIBRATION
    calibrations, dirs = [], {name: [] for name, _, _ in configs}
    every = math.ceil(len(configs) / CALIBRATIONS_PER_ROUND)
    for repeat in range(repeats):
        for index, (name, _, overrides) in enumerate(configs):
            if index % every == 0:
                calibrations.append(run(calibration_overrides, 2 * steps, out,
                                        run_name(calibration_name, len(calibrations))))
            dirs[name].append(run(overrides, steps, out, run_name(name, repeat)))
    return calibrations, dirs


POOLED = ("train_step_s", "train_step_cv", "rollouts_per_s", "throughput_cv", "lease_overhead_s", "fetch_s",
          "dissemination_s")
"""The calibration figures :func:`pooled` averages over the calibration's runs (the byte counts are
the same in every run)."""


def pooled(calibrations: list[Calibration]) -> Calibration:
    """One calibration from the calibration configuration's runs: each figure the mean over the
    runs, the learner's step times averaged step by step (they fall as the policy learns, see
    :meth:`Calibration.step_s`)."""
    first = calibrations[0]
    if len(calibrations) == 1:
        return first
    return first.model_copy(update={
        "source": ", ".join(c.source for c in calibrations),
        "step_seconds": [statistics.fmean(s) for s in zip(*(c.step_seconds for c in calibrations))],
        **{name: statistics.fmean(getattr(c, name) for c in calibrations) for name in POOLED}})


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean of one configuration's repeated measurements, in percent."""
    return 100 * (max(values) - min(values)) / statistics.fmean(values)


def probe_of(run_dir: Path) -> float | None:
    """The mean of the machine probes taken before and after ``run_dir``'s run (None for runs made without them)."""
    path = run_dir / "probe.json"
    probes = json.loads(path.read_text()).get("workload_probe_s") if path.is_file() else None
    return statistics.fmean(probes) if probes else None


def calibrate(run_dirs: list[Path]) -> tuple[Calibration, float | None]:
    """The calibration pooled over its runs, and the mean of the machine probes taken around them."""
    probes = [probe_of(run_dir) for run_dir in run_dirs]
    probe = statistics.fmean(probes) if all(probes) else None
    return pooled([calibrate_run(run_dir) for run_dir in run_dirs]), probe


def machine_ratio(run_dirs: list[Path], calibration_probe: float | None) -> float | None:
    """How much slower the machine was around the runs in ``run_dirs`` than around the calibration
    (>1: slower; the mean over the runs)."""
    probes = [probe_of(run_dir) for run_dir in run_dirs]
    if not calibration_probe or not all(probes):
        return None
    return statistics.fmean(probes) / calibration_probe


def at_speed(calibration: Calibration, ratio: float | None) -> Calibration:
    """The calibration as it would have measured on a machine ``ratio`` times slower: every
    computed duration scaled, every byte count kept (bandwidth caps do not drift)."""
    if not ratio:
        return calibration
    c = calibration
    return c.model_copy(update={
        "train_step_s": c.train_step_s * ratio, "step_seconds": [s * ratio for s in c.step_seconds],
        "rollouts_per_s": c.rollouts_per_s / ratio, "lease_overhead_s": c.lease_overhead_s * ratio,
        "fetch_s": c.fetch_s * ratio, "dissemination_s": c.dissemination_s * ratio})


def measured(run_dirs: list[Path], warmup: int) -> dict[str, float]:
    """Utilization and seconds per step of real runs over their steps after ``warmup``: the mean
    over the repeated runs of one configuration, and how far those runs' seconds per step lie apart."""
    utils, step_s = [], []
    for run_dir in run_dirs:
        steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner_busy_s" in r][warmup:]
        first, last = steps[0], steps[-1]
        busy = last["learner_busy_s"] - first["learner_busy_s"]
        idle = last["learner_idle_s"] - first["learner_idle_s"]
        utils.append(busy / (busy + idle))
        step_s.append((busy + idle) / (len(steps) - 1))
    return {"util_measured": statistics.fmean(utils), "step_s_measured": statistics.fmean(step_s),
            "step_s_spread_pct": spread_pct(step_s)}


def summary(rows: list[dict], key: str) -> dict[str, float]:
    """Median and worst absolute error, in points, of ``key`` over the rows."""
    errors = [abs(r[key]) for r in rows]
    return {"median_abs": statistics.median(errors), "worst_abs": max(errors)}


def publish(name: str, rows: list[dict], columns: list[str], out: Path, meta: dict, predictor: str, what: str) -> None:
    """What both benches end with: the table, the error summary (printed and in the results'
    meta), ``results.json`` and the plot ``out/NAME.png`` of ``predictor``'s figures (the rows'
    ``*_{predictor}`` columns, made by ``what``) against the measured ones."""
    from common import format_table, write_results

    print(format_table(rows, columns))
    util, step, speed = (summary(rows, key) for key in ("util_error_points", "step_error_pct", "step_error_at_speed_pct"))
    print(f"\nutilization error: median {util['median_abs']:.1f} points, worst {util['worst_abs']:.1f}; "
          f"seconds per step: median {step['median_abs']:.1f}%, worst {step['worst_abs']:.1f}% "
          f"(at the machine's measured speed: median {speed['median_abs']:.1f}%, worst {speed['worst_abs']:.1f}%; "
          f"{len(rows)} held-out configurations)")
    path = write_results(out, rows, {**meta, "util_error_points": util, "step_error_pct": step,
                                     "step_error_at_speed_pct": speed})
    plot(rows, out / f"{name}.png", predictor, what)
    print(f"wrote {path} and {out / f'{name}.png'}")


def plot(rows: list[dict], path: Path, predictor: str, what: str) -> None:
    """Predicted against measured utilization and seconds per step, with the goal's band (±10
    points, ±10%)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 7))
    markers = {"learner": "o", "generation": "s", "dissemination": "^"}
    for ax, key, label, band in ((axes[0], "util", "learner utilization", "±10 points"),
                                 (axes[1], "step_s", "seconds per learner step", "±10%")):
        top = 1.05 if key == "util" else 1.1 * max(max(r[f"{key}_measured"], r[f"{key}_{predictor}"]) for r in rows)
        for row in rows:
            ax.scatter(row[f"{key}_measured"], row[f"{key}_{predictor}"], marker=markers[row["regime"]],
                       label=f"{row['config']} ({row['regime']})")
        ax.plot([0, top], [0, top], "k--", lw=0.8)
        low, high = ([-0.1, top - 0.1], [0.1, top + 0.1]) if key == "util" else ([0, 0.9 * top], [0, 1.1 * top])
        ax.fill_between([0, top], low, high, color="gray", alpha=0.15, label=band)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"{predictor} {label}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)  # below, off the points
    fig.suptitle(f"held-out configurations: {what}, from one calibration")
    fig.tight_layout(rect=(0, 0.24, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def start(description: str, default_out: str) -> tuple[argparse.Namespace, int, list, dict[str, list[Path]],
                                                        Path, Calibration, float | None]:
    """What both benches begin with: the command line (``--quick``, ``--out``, ``--runs``,
    ``--repeats``), the run length, the held-out configurations and their run directories (trained
    here unless reused), where the runs live, and the calibration (printed)."""

    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--runs", type=Path,
                            help="reuse the run directories under this folder (its runs/) instead of training")
        parser.add_argument("--repeats", type=int, default=None,
                            help="real runs per held-out configuration (default 3; 1 with --quick)")

    args = parse_args(description, default_out, options)
    steps = 15 if args.quick else 40
    repeats = args.repeats or (1 if args.quick else 3)
    runs_at = args.runs or args.out
    configs = HELD_OUT[:2] if args.quick else HELD_OUT
    calibration_runs, run_dirs = run_all(configs, steps, runs_at, repeats)
    calibration, probe = calibrate(calibration_runs)
    print(f"calibration ({CALIBRATION[0]}): T_train {calibration.train_step_s:.3f}s, "
          f"{calibration.rollouts_per_s:.0f} rollouts/s per worker at factor 1, lease overhead "
          f"{calibration.lease_overhead_s * 1000:.0f} ms, fixed dissemination {calibration.dissemination_s:.3f}s, "
          f"fetch {calibration.fetch_s:.3f}s")
    return args, steps, configs, run_dirs, runs_at, calibration, probe
