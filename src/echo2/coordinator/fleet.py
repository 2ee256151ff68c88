"""Cost-aware activation at run time: profile every worker, keep the cheapest sufficient set active.

The rule is :mod:`echo2.planning.activation_rule` (the simulator applies the same one); this
module feeds it the live registry and applies its decision: parked workers get ``parked``
instead of leases. Re-planning happens when a worker joins, leaves or dies and every few learner
steps (a worker that slowed down shows up in its moving average). Billing
(:class:`echo2.planning.billing.Billing`, in wall seconds) counts active time only: a parked
worker is assumed released (a stopped spot instance), which is where the saving comes from.
"""

from __future__ import annotations

import logging
import math
import time

from echo2.coordinator.records import WorkerRecord
from echo2.core.dissemination import DisseminationCensus
from echo2.core.run_clock import RunClock
from echo2.planning.activation_rule import ActivationPolicy, replan
from echo2.planning.billing import Billing, cost_summary

log = logging.getLogger("echo2")


class Fleet:
    def __init__(self, policy: ActivationPolicy) -> None:
        self.policy = policy
        self.need: float | None = None
        self.billing = Billing(learner_price_per_hour=0.0)
        self._started = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self._started

    def bill(self, records: list[WorkerRecord]) -> None:
        """Bring billing in line with who is active now (call after any change of the active set)."""
        now = self._now()
        for record in records:
            if record.at_work:
                self.billing.start(record.worker_id, record.worker_class, record.price_per_hour, now)
            else:
                self.billing.stop(record.worker_id, record.worker_class, now)

    def replan(self, records: list[WorkerRecord], clock: RunClock, census: DisseminationCensus, reason: str) -> None:
        """Re-decide which live workers are active (:func:`echo2.planning.activation_rule.replan`,
        the simulator's too), then bill and log the change."""
        live = [r for r in records if r.in_fleet]
        decision, changed = replan(self.policy, live, clock, census, time.monotonic())
        if decision.need is not None:
            self.need = decision.need
        changes = [f"{'activated' if r.active else 'parked'} {r.name} "
                   f"(${r.price_per_hour:.2f}/h, {r.throughput or 0:.0f} rollouts/s"
                   f"{', to be measured again' if r.worker_id in decision.remeasure else ''})"
                   for r in changed]
        self.bill(records)
        if changes:
            have = sum(r.throughput or 0.0 for r in live if r.active)
            need = decision.need if decision.need is not None else math.inf
            log.info("activation (%s): %s; need %s rollouts/s, active fleet %.0f", reason, "; ".join(changes),
                     "all" if math.isinf(need) else f"{need:.0f}", have)

    def spent(self) -> tuple[float, dict[str, float]]:
        """Active worker-hours and dollars per worker class so far."""
        by_class = self.billing.by_class(self._now())
        return sum(self.billing.seconds.values()) / 3600, by_class

    def costs(self, learner_price_per_hour: float, wall_s: float) -> dict[str, float]:
        """Dollars so far; the centralized counterfactual is the learner's premium hardware doing the
        rollout hours too, at its own price."""
        worker_hours, by_class = self.spent()
        learner = learner_price_per_hour * wall_s / 3600
        return cost_summary(by_class, learner, learner + learner_price_per_hour * worker_hours)
