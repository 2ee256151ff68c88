"""The arms of ``bench/echo2_experiment.py`` and how one run of an arm is made and read back.

An arm is a set of config overrides and a placement: on this host alone (the co-located baseline)
or across hosts of the network lab (:mod:`echo2.lab`), the learner on one, each worker on its own,
every host's link shaped by the kernel to the same rate both ways. The learner (and anything it
starts) keeps to :data:`LEARNER_CPUS`; lab workers to :data:`WORKER_CPUS`, so that what an arm
adds is the workers' hardware, not a share of the learner's.

A finished run is read back from its run directory into one record (:func:`record`): every held-out
evaluation (its version in ``eval_versions``) timed from the learner's first step to the publish of
the version it evaluated, and priced at the dollars echo2 billed from the run's start up to that
version (the run's own ``cost_usd``, from the declared prices), the learner's utilization, the
staleness of what it trained on, the fleet's dollars per hour while it trained, the rows the
learner updated on (those with a learning signal, ``trained_sequences``) and left out of its steps
as implausible, and the share of trained tokens whose PPO clip zeroed their gradient (its mean
over steps: a stale token's ratio is taken against the policy that sampled it, so the clip stops
what the versions since have already pushed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RECIPE = "configs/smollm2-135m-chain-sum.yaml"
LEARNER_CPUS, WORKER_CPUS = [0], [1]
EVAL_CPUS = LEARNER_CPUS + WORKER_CPUS
"""The evaluator runs once training is over and the workers have stopped: every core is its own."""
LAB_WORKERS = ("w1", "w2")
CHUNK_MIB = 0.5
"""The recipe's LoRA version (about 5 MB in bf16) in ten chunks: a relay passes a version on while it
receives it (pipelined broadcast)."""
LEARNER_PRICE = 3.00
"""$/h of the learner's host: an H100 SXM on demand, $2.49-$3.99/h (pricegpu.pages.dev, H100 vs A100
cloud pricing, early 2026; the scenarios' [P2])."""
WORKER_PRICE = 0.34
"""$/h of each worker's host: an RTX 4090 on spot, $0.34/h (RunPod GPU pricing, March 2026; the
scenarios' [P1])."""
PRICE_SOURCES = {"learner": "H100 SXM on-demand $2.49-3.99/h [P2: pricegpu.pages.dev, early 2026]; $3.00 taken",
                 "worker": "RTX 4090 spot $0.34/h [P1: RunPod GPU pricing, March 2026]",
                 "scaling": "one CPU core of this machine stands for each host: the learner's core for the H100, "
                            "each worker's share of the other core for an RTX 4090 (prices as declared, speeds "
                            "as this machine's, not the cards')"}


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[str, ...]
    lab: bool
    """Learner and workers on lab hosts behind kernel-capped links (else: the co-located baseline)."""
    seeds: int
    """Seeds the experiment runs it with."""
    minutes: float = 20.0
    """Training minutes a run gets unless ``--minutes`` says otherwise: long enough to pass the
    target. Sync S = 0 steps at about 1.6x the baseline's pace and needed up to 200 versions: one of
    its seeds given 20 minutes never got there, so it gets 45."""


ARMS = (
    Arm("colocated", ("emulation.colocated=true", "protocol=sync", "staleness=0"), lab=False, seeds=3),
    Arm("sync-S0", ("protocol=sync", "staleness=0"), lab=True, seeds=3, minutes=45.0),
    Arm("async-S1", ("protocol=async", "staleness=1"), lab=True, seeds=1),
    Arm("async-S2", ("protocol=async", "staleness=2"), lab=True, seeds=3),
    Arm("async-S4", ("protocol=async", "staleness=4"), lab=True, seeds=1),
    Arm("async-S2-star", ("protocol=async", "staleness=2", "broadcast.mode=star"), lab=True, seeds=1),
)
BY_NAME = {arm.name: arm for arm in ARMS}


def overrides(arm: Arm, seed: int, minutes: float, eval_every: int, quick: bool) -> list[str]:
    """Everything a run of ``arm`` sets: its own overrides, the seed, the length, evaluation after
    training (nothing shares the CPUs with it meanwhile; greedy accuracy only, the figure the
    experiment reads, at half the cost), the learner's CPUs and price."""
    length = ["run.steps=6", "eval.size=20"] if quick else [f"run.max_minutes={minutes:g}"]
    return [*(() if quick else ("--config", RECIPE)), *arm.overrides, *length, f"run.seed={seed}",
            "eval.where=after", f"eval.every={eval_every}", "eval.show=0", "eval.sampled=false",
            f"eval.cpus={EVAL_CPUS}", f"eval.threads={len(EVAL_CPUS)}", "telemetry.progress=false",
            "telemetry.tensorboard=false", "checkpoint.every=0", f"learner.cpus={LEARNER_CPUS}",
            f"activation.learner_price_per_hour={LEARNER_PRICE}", f"broadcast.chunk_mib={CHUNK_MIB}"]


def run_arm(arm: Arm, seed: int, run_dir: Path, settings: list[str], cap_mbps: float | None) -> None:
    """One run of ``arm`` into ``run_dir`` (a lab arm needs root and ``cap_mbps``)."""
    if not arm.lab:
        command = [sys.executable, "-m", "echo2.cli", "train", *settings, f"run.dir={run_dir.parent}",
                   f"run.name={run_dir.name}"]
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        with (run_dir.parent / f"{run_dir.name}.log").open("w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
        return
    from echo2.lab import HostSpec, Lab
    from echo2.lab.rehearsal import LabRun
    from echo2.model.loading import pinned_cpus

    assert cap_mbps is not None
    hosts = [HostSpec(host, cap_mbps, cap_mbps) for host in ("learner", *LAB_WORKERS)]
    with Lab(hosts) as lab, LabRun(lab, "learner", run_dir, settings) as rehearsal:
        with pinned_cpus(WORKER_CPUS):  # the workers, started from here, inherit the CPUs
            for host in LAB_WORKERS:
                rehearsal.worker(host, host, "--price-per-hour", str(WORKER_PRICE), "--worker-class", "rtx4090")
        if rehearsal.wait(7200) != 0:
            raise RuntimeError(f"the {arm.name} seed {seed} run failed: see {rehearsal.logs}")


def record(arm: Arm, seed: int, run_dir: Path) -> dict:
    """A finished run as the experiment reads it (see the module docstring)."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    trains = [i for i in timeline if i["who"] == "learner" and i["kind"] == "train"]
    first = min(i["start"] for i in trains)
    published = {0: first, **{i["version"]: i["end"] for i in trains}}
    steps = [r for r in metrics if "reward_mean" in r]
    cost = {0: 0.0, **{r["version"]: r["cost_usd"] for r in steps}}
    evals = sorted((r["version"], r["eval_accuracy"]) for r in metrics
                   if "eval_accuracy" in r and r["version"] in published and r["version"] in cost)
    points = [(published[v] - first, cost[v], accuracy) for v, accuracy in evals]
    staleness: Counter[int] = Counter()
    for step in steps:
        staleness.update({int(key.rsplit("_", 1)[1]): value for key, value in step.items()
                          if key.startswith("staleness_count_")})
    last = steps[-1]
    final = [accuracy for _, _, accuracy in points[-3:]]
    return {"arm": arm.name, "seed": seed, "run_dir": str(run_dir), "steps": last["version"],
            "train_wall_s": published[last["version"]] - first, "utilization": last["utilization"],
            "samples_per_s": sum(r["samples"] for r in steps) / max(published[last["version"]] - first, 1e-9),
            "dollars_per_hour": 3600 * (last["cost_usd"] - steps[0]["cost_usd"])
            / max(published[last["version"]] - published[steps[0]["version"]], 1e-9),
            "learner_step_s": last["learner_busy_s"] / len(steps),
            "bytes_per_version": sum(r.get("delta_bytes", r["broadcast_bytes"]) for r in steps) / len(steps),
            "acc_start": points[0][2], "acc_final": sum(final) / len(final), "points": points,
            "eval_versions": [v for v, _ in evals],
            "staleness": {str(k): v for k, v in sorted(staleness.items())},
            "dropped_stale": last["groups_dropped_stale"],
            "implausible_rows": sum(r.get("implausible_rows", 0) for r in steps),
            "trained_sequences": sum(r["trained_sequences"] for r in steps),
            "echoclip_tokens": sum(r.get("echoclip_tokens", 0) for r in steps),
            "clip_fraction": sum(r["clip_fraction"] for r in steps) / len(steps)}
