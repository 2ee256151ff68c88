"""A run directory, real (``echo2 train``) or simulated (``echo2 simulate``), read for the report.

Both write ``metrics.jsonl`` (one record per learner step, evaluations merged in),
``timeline.jsonl`` (intervals), ``reliability.json`` and ``summary.txt``; a real run has
``config.yaml``, a simulated one ``scenario.yaml`` and ``simulation.json``. Anything missing is
reported as missing, never guessed. A run token in the config (runs written before it was
redacted there) is shown as ``<redacted>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from echo2.net.redact import REDACTED, redact_config
from echo2.telemetry.metrics import read_intervals, read_jsonl


@dataclass
class RunData:
    run_dir: Path
    records: list[dict]
    timeline: list[dict]
    reliability: dict | None
    config_text: str
    summary_text: str
    simulation: dict | None
    origin: float = field(init=False)
    """Time of the run's first record or interval (the x axis starts there)."""

    def __post_init__(self) -> None:
        times = [r["time"] for r in self.records if "time" in r] + [i["start"] for i in self.timeline]
        self.origin = min(times, default=0.0)

    @property
    def simulated(self) -> bool:
        return self.simulation is not None

    @property
    def steps(self) -> list[dict]:
        """One record per learner step."""
        return [r for r in self.records if "learner_busy_s" in r]

    @property
    def evals(self) -> list[dict]:
        return [r for r in self.records if "eval_accuracy" in r]

    @property
    def priced(self) -> bool:
        return any(r.get("cost_usd", 0) > 0 for r in self.steps)

    def staleness_counts(self) -> dict[int, int]:
        """Trained groups by staleness (versions behind the learner), summed over the steps."""
        counts: dict[int, int] = {}
        for record in self.steps:
            for key, value in record.items():
                if key.startswith("staleness_count_"):
                    lag = int(key.rsplit("_", 1)[1])
                    counts[lag] = counts.get(lag, 0) + value
        return dict(sorted(counts.items()))

    def busy_shares(self, bins: int) -> tuple[float, list[float]]:
        """The learner's busy share of each of ``bins`` equal time bins from :attr:`origin` to its
        last step or busy interval, and the bins' width in seconds (no bins: it was never busy)."""
        busy = [(i["start"], i["end"]) for i in self.timeline if i["who"] == "learner"]
        if not busy:
            return 0.0, []
        end = max([e for _, e in busy] + [r["time"] for r in self.steps])
        width = max(end - self.origin, 1e-9) / bins
        shares = [0.0] * bins
        for start, stop in busy:
            for index in range(int((start - self.origin) / width), min(bins, int((stop - self.origin) / width) + 1)):
                low, high = self.origin + index * width, self.origin + (index + 1) * width
                shares[index] += max(0.0, min(stop, high) - max(start, low)) / width
        return width, shares

    @property
    def disseminated(self) -> list[dict]:
        """The timeline's ``disseminate`` intervals: a version's publish (start) until the last
        live worker held it (end)."""
        return [i for i in self.timeline if i["kind"] == "disseminate"]

    def cost_at(self, time: float) -> float:
        """Dollars spent by ``time`` (the last step record at or before it)."""
        cost = 0.0
        for record in self.steps:
            if record["time"] > time:
                break
            cost = record.get("cost_usd", 0.0)
        return cost


def load_run(run_dir: Path) -> RunData:
    if not (run_dir / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no metrics.jsonl)")
    config = run_dir / "config.yaml" if (run_dir / "config.yaml").is_file() else run_dir / "scenario.yaml"
    return RunData(
        run_dir=run_dir,
        records=read_jsonl(run_dir / "metrics.jsonl"),
        timeline=read_intervals(run_dir / "timeline.jsonl"),
        reliability=_json(run_dir / "reliability.json"),
        config_text=redacted_config_text(config.read_text()) if config.is_file() else "",
        summary_text=(run_dir / "summary.txt").read_text() if (run_dir / "summary.txt").is_file() else "",
        simulation=_json(run_dir / "simulation.json"),
    )


def redacted_config_text(text: str) -> str:
    """``text`` (a config as YAML) with any ``coordinator.token`` shown as ``<redacted>``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:  # not YAML after all: blank every value of a key named token
        return re.sub(r"(?m)^(\s*token:).*$", rf"\1 {REDACTED}", text)
    if isinstance(data, dict) and redact_config(data) is not data:
        return yaml.safe_dump(redact_config(data), sort_keys=False)  # how dump_config wrote it
    return text


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None
