"""Cost-aware activation at run time: profile every worker, keep the cheapest sufficient set active.

ECHO-2 provisions just enough rollout capacity to keep the learner busy. Here the coordinator
does it live:

* **profiling** — each submitted lease gives a worker's wall throughput (its rollouts over the
  time from grant to submit, so slow links, throttling and contention all count); an exponential
  moving average smooths it;
* **the rule** — from the learner's measured step time and dissemination latency,
  :func:`echo2.planning.capacity.required_throughput` gives the aggregate throughput that keeps
  the learner at the target utilization; ``headroom`` multiplies it against noise;
* **activation** — :func:`echo2.planning.activation.choose_active` picks the cheapest measured set
  that meets it; the others are *parked* (registered, heartbeating, but given no leases). A worker
  not yet measured is active on probation, so that it gets measured at all. When the live fleet
  cannot reach the target (dissemination-bound, e.g. S = 0 or a slow uplink, or too few workers),
  the rule aims for ``reachable_share`` of the utilization unlimited throughput would give
  (:func:`echo2.planning.capacity.provisioning_need`) rather than running everyone for nothing;
  only when even that is out of reach is every worker active.

Re-planning happens when a worker joins or dies and every few learner steps (a worker that slowed
down shows up in its moving average). Billing counts active seconds only: a parked worker is
assumed to be released (a stopped spot instance), which is where the saving comes from.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from echo2.planning.activation import Candidate, choose_active
from echo2.planning.capacity import StepTimes, provisioning_need

if TYPE_CHECKING:
    from echo2.config import ActivationRule
    from echo2.coordinator.state import WorkerRecord

log = logging.getLogger("echo2")

#: Weight of the newest lease in a worker's throughput average.
EMA_WEIGHT = 0.3


@dataclass(frozen=True)
class FleetPolicy:
    enabled: bool
    rollouts_per_step: int
    staleness: int
    headroom: float = 1.1
    target_utilization: float = 1.0
    reachable_share: float = 0.95

    @classmethod
    def from_rule(cls, rule: ActivationRule, rollouts_per_step: int, staleness: int) -> FleetPolicy:
        return cls(enabled=rule.enabled, rollouts_per_step=rollouts_per_step, staleness=staleness,
                   headroom=rule.headroom, target_utilization=rule.target_utilization,
                   reachable_share=rule.reachable_share)


class Fleet:
    def __init__(self, policy: FleetPolicy) -> None:
        self.policy = policy
        self.need: float | None = None
        self._billed_at: float | None = None

    @staticmethod
    def observe(record: WorkerRecord, rollouts: int, wall_s: float) -> None:
        """Fold one lease's wall throughput into the worker's moving average."""
        if wall_s <= 0:
            return
        rate = rollouts / wall_s
        previous = record.throughput
        record.throughput = rate if previous is None else (1 - EMA_WEIGHT) * previous + EMA_WEIGHT * rate

    def bill(self, records: list[WorkerRecord]) -> None:
        """Accrue active seconds up to now (call before any change of the active set)."""
        now = time.monotonic()
        if self._billed_at is not None:
            for record in records:
                if record.alive and record.active:
                    record.active_seconds += now - self._billed_at
        self._billed_at = now

    def replan(self, records: list[WorkerRecord], train_s: float | None, broadcast_s: float | None,
               reason: str) -> None:
        """Re-decide which live workers are active (see module docstring)."""
        self.bill(records)
        live = [r for r in records if r.alive]
        if not self.policy.enabled or train_s is None:
            for record in live:
                record.active = True
            return
        times = StepTimes(max(train_s, 1e-6), broadcast_s or 0.0, self.policy.rollouts_per_step,
                          self.policy.staleness)
        probation = [r for r in live if r.throughput is None]
        measured = [r for r in live if r.throughput is not None]
        policy = self.policy
        need = provisioning_need(times, sum(r.throughput or 0.0 for r in live), policy.target_utilization,
                                 policy.headroom, policy.reachable_share)
        self.need = need
        if math.isinf(need):
            chosen = {r.worker_id for r in measured}
        else:
            still_needed = max(0.0, need - sum(r.throughput or 0.0 for r in probation))
            candidates = [Candidate(r.worker_id, r.price_per_hour, r.throughput or 0.0) for r in measured]
            chosen = set(choose_active(candidates, still_needed).active)
        changes = []
        for record in live:
            active = record in probation or record.worker_id in chosen
            if active != record.active:
                changes.append(f"{'activated' if active else 'parked'} {record.name} "
                               f"(${record.price_per_hour:.2f}/h, {record.throughput or 0:.0f} rollouts/s)")
                record.active = active
        if changes:
            have = sum(r.throughput or 0.0 for r in live if r.active)
            log.info("activation (%s): %s; need %s rollouts/s, active fleet %.0f", reason, "; ".join(changes),
                     "all" if math.isinf(need) else f"{need:.0f}", have)

    @staticmethod
    def costs(records: list[WorkerRecord], learner_price_per_hour: float, wall_s: float) -> dict[str, float]:
        """Dollars so far: per worker class, workers, learner, total, and the centralized counterfactual
        (the learner's premium hardware doing the rollout hours too, at its own price)."""
        by_class: Counter[str] = Counter()
        worker_hours = 0.0
        for record in records:
            by_class[record.worker_class] += record.price_per_hour * record.active_seconds / 3600
            worker_hours += record.active_seconds / 3600
        learner = learner_price_per_hour * wall_s / 3600
        values = {f"cost/{name}_usd": value for name, value in by_class.items()}
        values.update(cost_workers_usd=sum(by_class.values()), cost_learner_usd=learner,
                      cost_usd=learner + sum(by_class.values()),
                      cost_centralized_usd=learner + learner_price_per_hour * worker_hours)
        return values
