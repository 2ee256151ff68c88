"""Metric sinks: JSONL always (the run's source of truth), TensorBoard optionally."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import torch


class MetricsWriter:
    """Append one JSON object per record to ``metrics.jsonl``; mirror numbers to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, values: dict[str, Any]) -> None:
        record = {"step": step, "time": time.time(), **values}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)

    def histogram(self, name: str, values: list[float], step: int) -> None:
        """A distribution (e.g. the staleness of a batch) for TensorBoard's histogram view."""
        if self._tb is not None and values:
            self._tb.add_histogram(name, torch.tensor(values, dtype=torch.float32), step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


class TimelineWriter:
    """Intervals (who did what, when) for the timeline plot: ``timeline.jsonl``, thread-safe."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "timeline.jsonl"
        self._file = self.path.open("a")
        self._lock = threading.Lock()

    def interval(self, who: str, kind: str, start: float, end: float, version: int) -> None:
        line = json.dumps({"who": who, "kind": kind, "start": start, "end": end, "version": version})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
