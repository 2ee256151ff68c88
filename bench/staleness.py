"""How much staleness for how much speed? sync S = 0 vs async S = 1, 2, 4, on open and capped uplinks.

    python bench/staleness.py [--quick] [--out DIR] [--steps N] [--transfer-steps K] [--lab]

Every row is a real ``echo2 train`` run (learner + coordinator in this process, two worker
processes relaying weights to each other), same task, model, worker count and step budget; rows
differ only in protocol, staleness bound S and the link. The capped link is a real bandwidth limit,
the token bucket every weight upload goes through: the learner's (``emulation.learner_upload_mbps``)
and each worker relay's (``emulation.worker_upload_mbps``), set so that one version's transfer takes about
``K`` (default 2) learner steps. Both come from the first row (sync, open link), which the others
are then compared with: its learner step time and the bytes it sent per version (a delta version
when deltas are on), and the target accuracy (its final held-out accuracy less 2 points).

Measured side by side: wall time to the target, final accuracy (mean of the last 3 evals),
learner utilization, samples/s, groups dropped as stale, and each row's time to target against the
sync row on the same link (``time_vs_sync``; the claim checked: async S = 2 on the capped link
reaches the target in at most half the sync run's time, with final accuracy within 2 points).

``--lab`` (root) re-checks that claim on real links: after the calibration row, sync S = 0 and
async S = 2 and 4 run once with the token bucket (``capped``) and once across hosts of the network lab
(``kernel``: the learner on its host, each worker on its own, every host's link shaped by the
kernel to the same rate both ways, no cap in echo2's code; :mod:`echo2.lab`, docs/wan.md). Every
row of a ``--lab`` invocation runs the learner on a core of its own and the workers on the others
(:data:`LAB_CPUS`, as ``bench/heldout.py`` does): the lab's hosts share this machine's CPUs, and
unpinned, a worker that leases on one link kind and idles on the other moves CPU from the learner
to itself, which would be measured as the link's effect; and cuts versions into chunks of 1/8 MiB
(:data:`LAB_CHUNK_MIB`), so that the relay pipelines a version as ECHO-2's broadcast assumes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import common
from common import format_table, write_results

from echo2.config import load_config
from echo2.launch.train import run_training
from echo2.model.loading import pinned_cpus
from echo2.telemetry.metrics import read_jsonl

SETTINGS = [("sync", 0), ("async", 1), ("async", 2), ("async", 4)]
#: The workers' hosts of a ``--lab`` run (as many as a loopback run's local workers).
LAB_WORKERS = ("w1", "w2")
#: ``--lab``: (the learner's CPUs, the workers' CPUs) in every row (the learner's host as a machine of its own).
LAB_CPUS = ([0], [1])
#: ``--lab``: the chunk size in every row: this model's version (0.87 MB) in 7 chunks, so that a relay
#: forwards a version while it receives it (pipelined broadcast); in one 1 MiB chunk it is
#: store-and-forward, two whole transfers end to end, and a version reached the second worker in
#: 2.8 s on the kernel-shaped links (1.8 s in chunks of 1/8 MiB), against the two learner steps
#: (0.67 s) the link is sized for.
LAB_CHUNK_MIB = 0.125


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="learner steps per run (default 200; quick 6)")
    parser.add_argument("--transfer-steps", type=float, default=2.0,
                        help="the capped link makes one version's transfer take this many learner steps")
    parser.add_argument("--lab", action="store_true", help="sync S=0, async S=2 and 4 also on network-lab hosts, "
                                                            "links shaped by the kernel (root; docs/wan.md)")


def time_to_target(run_dir: Path, target: float) -> float | None:
    records = read_jsonl(run_dir / "metrics.jsonl")
    start = records[0]["time"]
    for record in records:
        if record.get("eval_accuracy", -1.0) >= target:
            return record["time"] - start
    return None


def link_calibration(run_dir: Path) -> tuple[float, float]:
    """(learner seconds per step, bytes sent per version) of a finished run."""
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    step_s = steps[-1]["learner_busy_s"] / len(steps)
    sent = [r.get("delta_bytes", r["broadcast_bytes"]) for r in steps]
    return step_s, statistics.mean(sent)


def overrides(args: argparse.Namespace, protocol: str, staleness: int) -> list[str]:
    """What every row sets alike: protocol, S, length, evaluation (and with ``--lab``, the CPUs and
    the chunk size)."""
    pinned = [f"learner.cpus={LAB_CPUS[0]}", f"workers.cpus={LAB_CPUS[1]}", f"broadcast.chunk_mib={LAB_CHUNK_MIB}"] \
        if args.lab else []
    return [f"protocol={protocol}", f"staleness={staleness}", f"run.steps={args.steps}", f"eval.every={args.eval_every}",
            f"eval.size={args.eval_size}", "eval.show=0", "telemetry.progress=false", "telemetry.tensorboard=false",
            "checkpoint.every=0", *pinned]


def run(args: argparse.Namespace, protocol: str, staleness: int, cap_mbps: float | None) -> dict:
    link = "open" if cap_mbps is None else f"{cap_mbps:.3g} Mbit/s"
    name = f"{protocol}-S{staleness}-{'open' if cap_mbps is None else 'capped'}"
    print(f"== {name} ({link})", flush=True)
    caps = [] if cap_mbps is None else [f"emulation.learner_upload_mbps={cap_mbps}", f"emulation.worker_upload_mbps={cap_mbps}"]
    config = load_config(overrides=[*overrides(args, protocol, staleness), *caps, f"run.dir={args.out / 'runs'}",
                                    f"run.name={name}"])
    summary = run_training(config)
    result = summary.result
    return {"protocol": protocol, "S": staleness, "link": "open" if cap_mbps is None else "capped",
            "cap_mbps": cap_mbps, "steps": result.steps, "wall_s": result.wall_seconds,
            "learner_util": result.utilization, "samples_per_s": result.samples / max(result.wall_seconds, 1e-9),
            "acc_start": summary.accuracy_before, "acc_final": summary.accuracy_after,
            "dropped": summary.groups_dropped, "run_dir": str(summary.run_dir)}


def lab_run(args: argparse.Namespace, protocol: str, staleness: int, cap_mbps: float) -> dict:
    """The same run with the learner and each worker on a host of its own, every host's link shaped
    by the kernel to ``cap_mbps`` both ways; the row read from the run's metrics (the same figures
    a loopback row gets from the run's summary: accuracy after = mean of the last 3 evals)."""
    from echo2.lab import HostSpec, Lab
    from echo2.lab.rehearsal import LabRun

    name = f"{protocol}-S{staleness}-kernel"
    print(f"== {name} ({cap_mbps:.3g} Mbit/s, shaped by the kernel)", flush=True)
    run_dir = args.out / "runs" / name
    hosts = [HostSpec(host, cap_mbps, cap_mbps) for host in ("learner", *LAB_WORKERS)]
    with Lab(hosts) as lab, LabRun(lab, "learner", run_dir, overrides(args, protocol, staleness)) as rehearsal:
        with pinned_cpus(LAB_CPUS[1]):  # the workers, started from here, inherit the CPUs
            for host in LAB_WORKERS:
                rehearsal.worker(host, host)
        if rehearsal.wait(3600) != 0:
            raise RuntimeError(f"the {name} run failed: see {rehearsal.logs}")
    records = read_jsonl(run_dir / "metrics.jsonl")
    steps, evals = [r for r in records if "loss" in r], [r["eval_accuracy"] for r in records if "eval_accuracy" in r]
    wall = steps[-1]["time"] - records[0]["time"]
    last = evals[1:][-3:] or evals[:1]
    return {"protocol": protocol, "S": staleness, "link": "kernel", "cap_mbps": cap_mbps, "steps": len(steps),
            "wall_s": wall, "learner_util": steps[-1]["learner_busy_s"] / wall,
            "samples_per_s": sum(r["samples"] for r in steps) / wall, "acc_start": evals[0],
            "acc_final": sum(last) / len(last), "dropped": steps[-1]["groups_dropped_stale"], "run_dir": str(run_dir)}


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/staleness", _options)
    args.steps = args.steps or (6 if args.quick else 200)
    args.eval_every, args.eval_size = (3, 100) if args.quick else (20, 300)
    # --lab: sync, S = 2 (the claim) and S = 4 (what S * T_train >= T_bcast asks once a version
    # takes longer to cross a real link than M / B says)
    settings = [SETTINGS[0], SETTINGS[2]] if args.quick else [*SETTINGS[:1], *SETTINGS[2:]] if args.lab else SETTINGS
    rows = [run(args, *settings[0], None)]
    step_s, version_bytes = link_calibration(Path(rows[0]["run_dir"]))
    cap_mbps = 8 * version_bytes / (args.transfer_steps * step_s) / 1e6
    print(f"   calibration: {step_s:.3f} s per learner step, {version_bytes / 1e6:.3f} MB per version -> "
          f"cap {cap_mbps:.3g} Mbit/s", flush=True)
    if not args.lab:
        rows += [run(args, protocol, staleness, None) for protocol, staleness in settings[1:]]
    rows += [run(args, protocol, staleness, cap_mbps) for protocol, staleness in settings]
    if args.lab:
        rows += [lab_run(args, protocol, staleness, cap_mbps) for protocol, staleness in settings]
    target = rows[0]["acc_final"] - 0.02
    for row in rows:
        row["time_to_target_s"] = time_to_target(Path(row["run_dir"]), target)
        sync = next(r for r in rows if r["protocol"] == "sync" and r["link"] == row["link"])
        row["time_vs_sync"] = (row["time_to_target_s"] / sync["time_to_target_s"]
                               if row["time_to_target_s"] and sync["time_to_target_s"] else None)
        row["acc_vs_sync"] = row["acc_final"] - sync["acc_final"]
    columns = ["protocol", "S", "link", "steps", "wall_s", "learner_util", "samples_per_s", "time_to_target_s",
               "time_vs_sync", "acc_start", "acc_final", "acc_vs_sync", "dropped"]
    print(f"\ntarget accuracy: {target:.3f} (the open sync run's final accuracy less 2 points); capped link: "
          f"{cap_mbps:.3g} Mbit/s on every uplink, one version in ~{args.transfer_steps:g} learner steps"
          f"{' (capped: the token bucket; kernel: lab hosts, both ways)' if args.lab else ''}")
    print(format_table(rows, columns))
    meta = {"target_accuracy": target, "quick": args.quick, "lab": args.lab, "steps": args.steps, "cap_mbps": cap_mbps,
            "calibration": {"learner_step_s": step_s, "bytes_per_version": version_bytes,
                            "transfer_steps": args.transfer_steps}}
    path = write_results(args.out, rows, meta)
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'staleness.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['protocol']} S={r['S']}\n{r['link']}" for r in rows]
    bars.bar(range(len(rows)), [r["time_to_target_s"] or 0.0 for r in rows],
             color=[{"capped": "tab:orange", "kernel": "tab:red"}.get(r["link"], "tab:blue") for r in rows])
    bars.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
    bars.set_ylabel("seconds to the target accuracy (0: not reached)")
    bars.set_title("wall time to target (orange: token-bucket cap; red: kernel-shaped lab links)")
    for row in rows:
        records = [r for r in read_jsonl(Path(row["run_dir"]) / "metrics.jsonl") if "eval_accuracy" in r]
        start = records[0]["time"]
        curves.plot([r["time"] - start for r in records], [r["eval_accuracy"] for r in records],
                    {"capped": "--", "kernel": ":"}.get(row["link"], "-"), label=f"{row['protocol']} S={row['S']} {row['link']}")
    curves.set_xlabel("wall time (s)")
    curves.set_ylabel("held-out greedy accuracy")
    curves.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "staleness.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
