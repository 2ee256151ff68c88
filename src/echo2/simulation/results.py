"""The outcome of a simulated run, its summary, and the run directory ``echo2 simulate`` writes.

The directory has the files a real run has where they make sense — ``metrics.jsonl``,
``timeline.jsonl``, ``reliability.json``, ``summary.txt`` — so ``echo2 report`` reads both, plus
``scenario.yaml`` (the inputs) and ``simulation.json`` (this summary, with the centralized
baseline and the capacity model's prediction for comparison).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from echo2.planning.payoff import PayoffPoint
from echo2.planning.provision import provision
from echo2.simulation.centralized import CentralizedResult
from echo2.simulation.scenario import Scenario


@dataclass
class SimResult:
    scenario: Scenario
    steps: int
    wall_s: float
    """Simulated seconds until the last step ended."""
    startup_s: float
    """Wait for the first batch (excluded from utilization, as in a real run)."""
    busy_s: float
    idle_s: float
    staleness: dict[int, int]
    """Groups trained, by version lag."""
    dissemination: list[tuple[int, float]]
    """(version, publish -> last running worker holding it), seconds."""
    cost_by_class: dict[str, float]
    worker_hours: dict[str, float]
    cost_learner_usd: float
    rollouts_generated: int
    rollouts_trained: int
    wasted: dict[str, int]
    """Rollouts generated but never trained, by reason: stale, preempted, late (lease expired)."""
    reliability: dict
    centralized: CentralizedResult | None
    records: list[dict] = field(repr=False)
    timeline: list[dict] = field(repr=False)
    events: int = 0
    runtime_s: float = 0.0

    @property
    def utilization(self) -> float:
        return self.busy_s / max(self.busy_s + self.idle_s, 1e-9)

    @property
    def train_wall_s(self) -> float:
        """Busy + idle: the run's wall time after the first batch arrived."""
        return self.busy_s + self.idle_s

    @property
    def cost_usd(self) -> float:
        return self.cost_learner_usd + sum(self.cost_by_class.values())

    @property
    def cost_per_step(self) -> float:
        return self.cost_usd / self.steps

    def payoff(self) -> PayoffPoint | None:
        """Where the run sits on the map of :mod:`echo2.planning.payoff` (None: no baseline)."""
        baseline = self.centralized
        if baseline is None or baseline.generation_s <= 0:
            return None
        workers_per_token = sum(self.cost_by_class.values()) / baseline.tokens
        return PayoffPoint(token_price_ratio=workers_per_token / baseline.usd_per_token,
                           generation_share=baseline.generation_share, utilization=self.utilization,
                           ratio=self.cost_usd / baseline.cost_usd)

    def summary(self) -> dict:
        latencies = [latency for _, latency in self.dissemination]
        lags = [lag for lag, count in self.staleness.items() for _ in range(count)]
        summary = {
            "scenario": self.scenario.name, "steps": self.steps, "wall_s": self.wall_s, "startup_s": self.startup_s,
            "train_wall_s": self.train_wall_s, "learner_utilization": self.utilization,
            "seconds_per_step": self.train_wall_s / max(self.steps - 1, 1),
            "staleness_histogram": self.staleness, "staleness_mean": statistics.fmean(lags) if lags else 0.0,
            "dissemination_mean_s": statistics.fmean(latencies) if latencies else None,
            "dissemination_p95_s": _quantile(latencies, 0.95), "dissemination_max_s": max(latencies, default=None),
            "cost_usd": self.cost_usd, "cost_per_step_usd": self.cost_per_step, "cost_learner_usd": self.cost_learner_usd,
            "cost_by_class_usd": self.cost_by_class, "worker_hours_by_class": self.worker_hours,
            "rollouts_generated": self.rollouts_generated, "rollouts_trained": self.rollouts_trained,
            "rollouts_wasted": self.wasted, "reliability": self.reliability,
            "events": self.events, "runtime_s": self.runtime_s, "capacity_model": planned(self.scenario),
        }
        if self.centralized is not None:
            c = self.centralized
            summary["centralized"] = {"wall_s": c.wall_s, "learner_utilization": c.utilization,
                                      "cost_usd": c.cost_usd, "cost_per_step_usd": c.cost_per_step,
                                      "staleness_mean": 0.0, "dissemination_mean_s": 0.0, "rollouts_wasted": 0}
            summary["cost_ratio_vs_centralized"] = self.cost_usd / c.cost_usd
            summary["centralized"]["generation_share"] = c.generation_share
            if (point := self.payoff()) is not None:
                summary["payoff"] = {**asdict(point), "predicted": point.predicted}
        return summary

    def lines(self) -> list[str]:
        s = self.summary()
        wasted = sum(self.wasted.values())
        lines = [
            (f"simulated {self.scenario.name}: {self.steps} steps in {_duration(self.wall_s)} "
             f"({s['seconds_per_step']:.1f}s per step) | learner utilization {self.utilization:.1%}"),
            f"staleness mean {s['staleness_mean']:.2f} {self.staleness} | dissemination "
            + ("-" if s["dissemination_mean_s"] is None else
               f"mean {s['dissemination_mean_s']:.1f}s, p95 {s['dissemination_p95_s']:.1f}s"),
            f"cost ${self.cost_usd:,.2f} (${self.cost_per_step:.4f} per step; learner ${self.cost_learner_usd:,.2f}; "
            + ", ".join(f"{k} ${v:,.2f} over {self.worker_hours[k]:,.1f} h" for k, v in self.cost_by_class.items())
            + ")",
            (f"rollouts: {self.rollouts_generated:,} generated, {self.rollouts_trained:,} trained, {wasted:,} wasted "
             f"{self.wasted or ''} | workers preempted {self.reliability['workers_dead']}, "
             f"left on notice {self.reliability['workers_left']}"),
        ]
        plan = s["capacity_model"]
        lines.append(f"capacity model (echo2 plan): utilization {plan['utilization']:.1%}, {plan['step_s']:.1f}s "
                     f"per step, ${plan['cost_per_step_usd']:.4f} per step with {plan['workers']}")
        if self.centralized is not None:
            c = self.centralized
            lines.append(f"centralized co-located baseline: {_duration(c.wall_s)}, ${c.cost_usd:,.2f} "
                         f"(${c.cost_per_step:.4f} per step), training {c.utilization:.1%} of the time, generating "
                         f"{c.generation_share:.1%} | distributed / centralized cost {self.cost_usd / c.cost_usd:.2f}")
            if (point := self.payoff()) is not None:
                lines.append(f"where it sits (echo2.planning.payoff): workers' $ per trained token "
                             f"{point.token_price_ratio:.2f}x the co-located learner's, generation share "
                             f"{point.generation_share:.2f}, utilization {point.utilization:.2f} -> "
                             f"(1 - g)/U + rho g = {point.predicted:.2f}")
        lines.append(f"({self.events:,} events in {self.runtime_s:.1f}s)")
        return lines


def planned(scenario: Scenario) -> dict:
    """What ``echo2 plan`` (the capacity model) predicts for the scenario's inventory."""
    recipe, broadcast = scenario.recipe, scenario.broadcast
    plan = provision(scenario.inventory(), recipe.rollouts_per_step, recipe.staleness, broadcast.mode,
                     broadcast.chunk_mib, scenario.activation.target_utilization, scenario.activation.reachable_share)
    return {"utilization": plan.utilization, "step_s": plan.step_s, "cost_per_step_usd": plan.cost_per_step,
            "broadcast_s": plan.broadcast_s, "workers": plan.chosen}


def write_run_dir(result: SimResult, out: Path) -> Path:
    """Write ``out`` (created) as a run directory that ``echo2 report`` reads."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(result.scenario.inputs(), sort_keys=False))
    _jsonl(out / "metrics.jsonl", result.records)
    _jsonl(out / "timeline.jsonl", result.timeline)
    (out / "reliability.json").write_text(json.dumps(result.reliability, indent=2))
    (out / "simulation.json").write_text(json.dumps(result.summary(), indent=2))
    (out / "summary.txt").write_text("\n".join(result.lines()) + "\n")
    return out


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.1f} s"

