"""Metric sinks: JSONL always (the run's source of truth); TensorBoard and experiment trackers
(:mod:`echo2.telemetry.trackers`) optionally."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from echo2.telemetry.trackers import Tracker


class MetricsWriter:
    """Append one JSON object per record to ``metrics.jsonl``; mirror its numbers to TensorBoard
    and to the ``trackers``, which :meth:`close` finishes."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_after: int | None = None,
                 trackers: Sequence[Tracker] = ()) -> None:
        """``resume_after``: a resumed run keeps only the records up to that step (the ones after
        it belong to the steps the crash lost, which the resumed run redoes)."""
        self.path = run_dir / "metrics.jsonl"
        if resume_after is not None:
            kept = [json.dumps(r) for r in read_jsonl(self.path) if r.get("step", 0) <= resume_after]
            partial = self.path.with_suffix(".partial")
            partial.write_text("".join(line + "\n" for line in kept))
            partial.replace(self.path)
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        self._trackers = list(trackers)

    def log(self, step: int, values: dict[str, Any]) -> None:
        record = finite_only({"step": step, "time": time.time(), **values})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        numbers = scalars(values)
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)
        if numbers:
            for tracker in self._trackers:
                tracker.log(numbers, step=step)

    def histogram(self, name: str, values: list[float], step: int) -> None:
        """A distribution (e.g. the staleness of a batch) for TensorBoard's histogram view (only
        TensorBoard's: the trackers get scalars)."""
        if self._tb is not None and values:
            self._tb.add_histogram(name, np.asarray(values, dtype=np.float32), step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        for tracker in self._trackers:
            tracker.finish()


def scalars(values: dict[str, Any]) -> dict[str, int | float]:
    """The plain numbers of ``values`` (flags are not: ``True`` is an ``int`` to Python)."""
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TimelineWriter:
    """Intervals (who did what, when) for the timeline plot: ``timeline.jsonl``, thread-safe."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "timeline.jsonl"
        self._file = self.path.open("a")
        self._lock = threading.Lock()

    def interval(self, who: str, kind: str, start: float, end: float, version: int) -> None:
        if not (math.isfinite(start) and math.isfinite(end)):
            return
        line = json.dumps({"who": who, "kind": kind, "start": start, "end": end, "version": version})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


_NOT_FINITE = object()


def finite_only(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without its NaN and infinite numbers: JSON has none, and one made every reader of
    a run directory (report, dashboard, plots) fail for good."""
    return {key: value for key, value in record.items()
            if value is not _NOT_FINITE and not (isinstance(value, float) and not math.isfinite(value))}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of ``path``; a torn last line (the writer was killed mid-write) and anything
    that is not a JSON object are skipped, NaN and infinite values dropped (:func:`finite_only`)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line, parse_constant=lambda _: _NOT_FINITE)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(finite_only(record))
    return records


def read_intervals(path: Path) -> list[dict[str, Any]]:
    """The intervals of a ``timeline.jsonl`` that have a finite start no later than their end."""
    return [r for r in read_jsonl(path) if isinstance(r.get("start"), (int, float)) and
            isinstance(r.get("end"), (int, float)) and r["start"] <= r["end"] and "kind" in r and "who" in r]
