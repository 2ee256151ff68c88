"""What a simulated run records, in the shapes a real run writes them (``learner/loop.py``).

Per learner step a ``metrics.jsonl`` record with the same keys (utilization, busy/idle seconds,
staleness counts, dissemination latencies, costs per worker class, the centralized baseline at
equal steps); ``timeline.jsonl`` intervals for the learner, the first few workers and every
version's dissemination; the staleness histogram and the rollouts wasted, by reason.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from echo2.core.books import Books
from echo2.planning.billing import Billing, cost_summary
from echo2.simulation.centralized import CentralizedResult
from echo2.simulation.events import EventQueue
from echo2.simulation.fleet import SimWorker
from echo2.simulation.results import SimResult
from echo2.simulation.scenario import Scenario


class RunView(Protocol):
    """What the recorder reads of a simulated run (:class:`echo2.simulation.state.SimState`)."""

    queue: EventQueue
    step: int
    busy_s: float
    idle_s: float
    startup_s: float
    books: Books
    running: dict[str, SimWorker]
    workers: Sequence[SimWorker]
    billing: Billing


class Recorder:
    def __init__(self, scenario: Scenario, timeline_ids: set[str], centralized: CentralizedResult | None) -> None:
        self.scenario = scenario
        self.timeline_ids = timeline_ids
        self.centralized = centralized
        self.records: list[dict] = []
        self.timeline: list[dict] = []
        self.staleness: Counter[int] = Counter()
        self.dissemination: list[tuple[int, float]] = []
        self.generated = 0
        self.wasted: Counter[str] = Counter()

    def waste(self, reason: str, rollouts: int) -> None:
        self.wasted[reason] += rollouts

    def interval(self, who: str, kind: str, start: float, end: float, version: int) -> None:
        if who in self.timeline_ids:
            self.timeline.append({"who": who, "kind": kind, "start": start, "end": end, "version": version})

    def disseminated(self, version: int, published: float, loaded: float) -> None:
        self.dissemination.append((version, loaded - published))
        self.timeline.append({"who": "broadcast", "kind": "disseminate", "start": published, "end": loaded,
                              "version": version})

    def step(self, sim: RunView, versions: list[int], started: float, latencies: list[float]) -> None:
        """Record the step that just ended (``latencies``: the disseminations completed since the last)."""
        now, step = sim.queue.now, sim.step
        self.timeline.append({"who": "learner", "kind": "train", "start": started, "end": now, "version": step})
        staleness = Counter(step - 1 - v for v in versions)
        self.staleness.update(staleness)
        rollouts = self.scenario.recipe.rollouts_per_step
        record = {
            "step": step, "time": now, "version": step, "samples": rollouts, "train_seconds": now - started,
            "learner_busy_s": sim.busy_s, "learner_idle_s": sim.idle_s, "startup_s": sim.startup_s,
            "utilization": sim.busy_s / max(sim.busy_s + sim.idle_s, 1e-9), "samples_per_s": step * rollouts / now,
            "staleness_mean": sum(k * n for k, n in staleness.items()) / len(versions),
            "staleness_max": max(staleness), **{f"staleness_count_{k}": n for k, n in sorted(staleness.items())},
            "groups_dropped_stale": sim.books.ledger.dropped_stale,
            "leases_expired": sim.books.counters.leases_expired, "workers_alive": len(sim.running),
            "workers_active": sum(w.alive and w.active for w in sim.workers), **self.costs(sim, now),
        }
        if latencies:
            record.update(dissemination_s=statistics.fmean(latencies), dissemination_max_s=max(latencies))
        self.records.append(record)

    def costs(self, sim: RunView, now: float) -> dict[str, float]:
        by_class = sim.billing.by_class(now)
        centralized = self.centralized.cost_per_step * sim.step if self.centralized else 0.0
        return cost_summary({c.name: by_class.get(c.name, 0.0) for c in self.scenario.fleet}, sim.billing.learner(now),
                            centralized)

    def result(self, sim: RunView, runtime_s: float) -> SimResult:
        counters, ledger = sim.books.counters, sim.books.ledger
        trained = counters.groups_trained * self.scenario.recipe.rollout.group_size
        now = sim.queue.now
        reliability = {
            "groups_trained": counters.groups_trained, "leases_issued": counters.leases_issued,
            "leases_completed": counters.leases_completed, "leases_expired": counters.leases_expired,
            "leases_outstanding": len(sim.books.active_leases()), "prompts_requeued": ledger.requeued_total,
            "groups_accepted": counters.groups_accepted,
            "groups_rejected": ({"expired_lease": counters.groups_rejected_expired_lease}
                                if counters.groups_rejected_expired_lease else {}),
            "duplicate_submissions": 0, "groups_dropped_stale": ledger.dropped_stale,
            "groups_discarded_quarantined": 0, "groups_buffered": len(ledger),
            "workers_dead": counters.workers_dead, "workers_left": counters.workers_left, "workers_quarantined": 0,
            "workers_reactivated": sim.billing.reactivations(),
        }
        billing = sim.billing
        billing.by_class(now)
        return SimResult(
            scenario=self.scenario, steps=sim.step, wall_s=now, startup_s=sim.startup_s, busy_s=sim.busy_s,
            idle_s=sim.idle_s, staleness=dict(sorted(self.staleness.items())), dissemination=self.dissemination,
            cost_by_class={c.name: billing.accrued.get(c.name, 0.0) for c in self.scenario.fleet},
            worker_hours={c.name: billing.seconds.get(c.name, 0.0) / 3600 for c in self.scenario.fleet},
            cost_learner_usd=billing.learner(now), rollouts_generated=self.generated, rollouts_trained=trained,
            wasted=dict(self.wasted), reliability=reliability, centralized=self.centralized, records=self.records,
            timeline=self.timeline, events=sim.queue.processed, runtime_s=runtime_s,
        )
