"""A run directory read while the learner writes it, for the live dashboard.

:func:`echo2.report.data.load_run` reads whole files once; a dashboard asks every few seconds
for hours, so :class:`LiveRun` reads only the lines appended since its last read (a line still
being written waits for the next one) and keeps only the fields the dashboard shows: memory
and work stay small however long the run and however many workers its records name. What it
returns is a :class:`~echo2.report.data.RunData`, so the report's own readings of it apply.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import yaml

from echo2.report.data import RunData

#: Fields of a ``metrics.jsonl`` record the dashboard uses (plus the ``staleness_count_*`` ones).
KEPT_FIELDS = frozenset({"step", "time", "version", "learner_busy_s", "learner_idle_s", "utilization", "reward_mean",
                         "eval_accuracy", "eval_sampled_reward", "samples_per_s", "cost_usd", "cost_learner_usd",
                         "cost_centralized_usd"})


class JsonlTail:
    """The records appended to a JSONL file since the last call (none while it does not exist)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as file:
                file.seek(self.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        complete = data.rfind(b"\n") + 1  # a torn last line is read again, whole, next time
        self.offset += complete
        records = []
        for line in data[:complete].splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k in KEPT_FIELDS or k.startswith("staleness_count_")}


class LiveRun:
    """``run_dir`` as the learner has written it so far (thread-safe: HTTP handlers share it)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._metrics, self._timeline = JsonlTail(run_dir / "metrics.jsonl"), JsonlTail(run_dir / "timeline.jsonl")
        self._records: list[dict[str, Any]] = []
        self._intervals: list[dict[str, Any]] = []  # the learner's busy intervals and the disseminations
        self._lock = threading.Lock()
        self.steps_total = _steps_total(run_dir / "config.yaml")
        """``run.steps`` of the run's ``config.yaml`` (None without one)."""

    def read(self) -> RunData:
        with self._lock:
            self._records += [_slim(r) for r in self._metrics.new()]
            self._intervals += [i for i in self._timeline.new() if i["who"] == "learner" or i["kind"] == "disseminate"]
            return RunData(run_dir=self.run_dir, records=list(self._records), timeline=list(self._intervals),
                           reliability=None, config_text="", summary_text="", simulation=None)


def _steps_total(config: Path) -> int | None:
    try:
        return int(yaml.safe_load(config.read_text())["run"]["steps"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
