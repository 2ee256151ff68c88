"""Helpers every benchmark shares: the command line, the table, ``results.json``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from echo2.model.sources import SHIPPED_MODEL, model_fingerprint


def parse_args(description: str, default_out: str,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """``--quick`` and ``--out``, plus whatever ``extra`` adds to the parser."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="short variant (what the test suite runs)")
    parser.add_argument("--out", type=Path, default=Path(default_out), help="output directory")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.2) -> None:
    """Poll ``predicate`` every ``every_s`` until it holds; TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f}s for {what}")
        time.sleep(every_s)


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
        return "-" if value is None else str(value)

    widths = [max([len(c)] + [len(cell(r.get(c))) for r in rows]) for c in columns]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(cell(r.get(c)).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)


#: What a benchmark's figures depend on: the package and the benches (not the table generator).
CODE_PATHS = ("src", "bench", ":(exclude)bench/tables.py")


def git(*args: str) -> str:
    """Output of a git command in the repository ("" when git or the repository is missing)."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()


def provenance() -> dict[str, Any]:
    """The commit the benchmark ran on (``+dirty`` with uncommitted changes to the code it ran,
    :data:`CODE_PATHS`; documentation may change meanwhile) and the machine. ``ECHO2_COMMIT``
    names the commit of a copy of the tree sent elsewhere (a lent GPU machine), whose own git
    history, if any, may be older than its files."""
    commit = os.environ.get("ECHO2_COMMIT") or git("rev-parse", "HEAD") or None
    if commit and "ECHO2_COMMIT" not in os.environ and git("status", "--porcelain", "--untracked-files=no", "--",
                                                          *CODE_PATHS):
        commit += "+dirty"
    return {"commit": commit, "machine": f"{platform.machine()}, {os.cpu_count()} cores, {cpu_model()}",
            "cpu_flags": cpu_info("flags")}


def cpu_info(field: str) -> str:
    """A field of Linux's ``/proc/cpuinfo`` ("" elsewhere): the processor's name or its flags. Machines
    of one kind differ in both (one with AVX-512 and AMX runs bf16 matmuls at four times the pace of
    one with AVX2 only), so a run's pace is only comparable on the same one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The processor's name (else what ``platform`` knows)."""
    return cpu_info("model name") or platform.processor() or "unknown processor"


def write_results(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any],
                  models: Sequence[str] = (SHIPPED_MODEL,)) -> Path:
    """``out/results.json``: the rows and ``meta``, with what every results file records: the
    commit, the machine and the hash of each model the rows ran (``models``; none for benches
    that run no model)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    fingerprints = {name: model_fingerprint(name) for name in models}
    path.write_text(json.dumps({"meta": {**provenance(), "models": fingerprints, **meta}, "rows": rows}, indent=2))
    return path


def eval_curve(run_dir: Path) -> list[dict[str, float]]:
    """The run's evaluations in order: step, seconds since the first, greedy accuracy, sampled reward."""
    from echo2.telemetry.metrics import read_jsonl

    records = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "eval_accuracy" in r]
    start = records[0]["time"]
    return [{"step": r["version"], "time_s": r["time"] - start, "accuracy": r["eval_accuracy"],
             "sampled": r["eval_sampled_reward"]} for r in records]


def step_means(run_dir: Path, keys: list[str], last: int | None = None) -> dict[str, float | None]:
    """Mean of each of ``keys`` over the run's step records (the ``last`` ones only when given)."""
    from echo2.telemetry.metrics import read_jsonl

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    steps = steps[-last:] if last else steps
    means: dict[str, float | None] = {}
    for key in keys:
        values = [r[key] for r in steps if key in r]
        means[key] = sum(values) / len(values) if values else None
    return means


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, var ** 0.5


#: Student's t 97.5% quantiles by degrees of freedom (two-sided 95% intervals on a few seeds).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df: float) -> float:
    """Student's t 97.5% quantile at ``df`` degrees of freedom, rounded down to a tabled one (a
    fractional Welch df gets the wider interval)."""
    return _T975[max(d for d in _T975 if d <= max(df, 1))] if df <= 30 else 1.96


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its two-sided 95% Student-t interval (None for one value): on
    paired per-seed differences, the interval of the mean difference."""
    mean, std = mean_std(values)
    if len(values) < 2:
        return mean, None
    return mean, t975(len(values) - 1) * std / len(values) ** 0.5


def coordinator_endpoint(run_dir: Path, done: threading.Event) -> dict[str, Any] | None:
    """The run's coordinator URL and token (``RUN_DIR/coordinator.json``) once the learner has
    written them; None if ``done`` is set first (a bench that starts processes beside a run)."""
    from echo2.launch.train import COORDINATOR_FILE

    path = run_dir / COORDINATOR_FILE
    while not path.exists():
        if done.wait(0.1):
            return None
    return json.loads(path.read_text())


#: The line a worker logs for each accepted submission (``echo2.rollout.worker``).
ACCEPTED = re.compile(r"lease \S+: (\d+) groups accepted")


def ledger(run_dir: Path, worker_logs: Sequence[Path], report: dict[str, Any], group_size: int) -> dict[str, int]:
    """The coordinator's books against an independent count: the groups the workers logged as
    accepted (their own logs) less the groups the learner logged as trained (``metrics.jsonl``)
    must be what the coordinator still held or dropped at the end (buffered, stale, from a
    quarantined worker): ``ledger_gap`` = 0. Also the lease ledger (issued = completed + expired +
    outstanding) and the report's prompts lost and groups trained twice."""
    from echo2.telemetry.metrics import read_jsonl

    logged = sum(int(m.group(1)) for log in worker_logs for m in ACCEPTED.finditer(log.read_text(errors="replace")))
    trained = sum(r["samples"] for r in read_jsonl(run_dir / "metrics.jsonl") if "samples" in r) // group_size
    held = report["groups_buffered"] + report["groups_dropped_stale"] + report["groups_discarded_quarantined"]
    closed = report["leases_completed"] + report["leases_expired"] + report["leases_outstanding"]
    return {"prompts_lost": report["prompts_unaccounted"], "trained_twice": report["groups_trained_twice"],
            "leases_unaccounted": report["leases_issued"] - closed, "workers_logged_accepted": logged,
            "learner_logged_trained": trained, "coordinator_held": held, "ledger_gap": logged - trained - held}
