"""Cost accounting, one book for live runs and simulations: workers billed while running, the learner all along.

No clock here: the caller passes the time of every change (the coordinator wall seconds, the
simulator simulated ones). A live run bills a worker while it is active: a parked worker is
assumed released (a stopped spot instance), which is where cost-aware activation saves. A
simulation may also bill parked workers at ``activation.parked_price_fraction`` of their price,
and bills a preempted worker's replacement while it boots.
"""

from __future__ import annotations

from collections import Counter


class Billing:
    def __init__(self, learner_price_per_hour: float) -> None:
        self.learner_rate = learner_price_per_hour / 3600
        self.accrued: Counter[str] = Counter()
        """Dollars per worker class, up to ``self.since``."""
        self.rate: Counter[str] = Counter()
        """Dollars per second per worker class now being billed."""
        self.since = 0.0
        self.billing: dict[str, tuple[float, bool]] = {}
        """Worker id -> ($/s, counted as active) for the workers billed now."""
        self.seconds: Counter[str] = Counter()
        """Active (not parked) worker-seconds per class, up to ``since``."""
        self.count: Counter[str] = Counter()
        """Active workers per class now."""
        self.activations: Counter[str] = Counter()
        """Worker id -> times it started being billed as active (its first start included): more
        than one is a parked worker activated again, what the activation rule's switching costs."""

    def _settle(self, now: float) -> None:
        elapsed = now - self.since
        for name, rate in self.rate.items():
            self.accrued[name] += rate * elapsed
        for name, count in self.count.items():
            self.seconds[name] += count * elapsed
        self.since = now

    def start(self, worker_id: str, worker_class: str, price_per_hour: float, now: float, active: bool = True) -> None:
        """Bill ``worker_id`` at ``price_per_hour`` from ``now`` (re-prices a worker already billed);
        ``active`` workers count in the worker-hours."""
        state = (price_per_hour / 3600, active)
        previous = self.billing.get(worker_id)
        if previous == state:
            return
        if active and not (previous and previous[1]):
            self.activations[worker_id] += 1
        self.stop(worker_id, worker_class, now)
        self.billing[worker_id] = state
        self.rate[worker_class] += state[0]
        self.count[worker_class] += active

    def stop(self, worker_id: str, worker_class: str, now: float) -> None:
        self._settle(now)
        if worker_id not in self.billing:
            return
        rate, active = self.billing.pop(worker_id)
        self.rate[worker_class] -= rate
        self.count[worker_class] -= active

    def reactivations(self) -> int:
        """Times a worker parked (or stopped) earlier was billed as active again."""
        return sum(count - 1 for count in self.activations.values())

    def by_class(self, now: float) -> dict[str, float]:
        self._settle(now)
        return dict(self.accrued)

    def learner(self, now: float) -> float:
        return self.learner_rate * now


def cost_summary(by_class: dict[str, float], learner_usd: float, centralized_usd: float) -> dict[str, float]:
    """The run's cost metrics, as live runs and simulations report them: dollars per worker class,
    workers, learner, total, and the centralized counterfactual."""
    workers = sum(by_class.values())
    return {**{f"cost/{name}_usd": value for name, value in by_class.items()},
            "cost_workers_usd": workers, "cost_learner_usd": learner_usd, "cost_usd": workers + learner_usd,
            "cost_centralized_usd": centralized_usd}
