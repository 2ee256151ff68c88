"""The provisioning rule of cost-aware activation, on a small view of each worker.

ECHO-2 provisions just enough rollout capacity to keep the learner busy. This is the rule, with
no clock and no coordinator in it, so that a live run (``coordinator/fleet.py``) and a simulated
one (``simulation/engine.py``) decide with the same function:

* **profiling** (:func:`profile`) — each submitted lease gives a worker's wall throughput (its
  rollouts over the time from grant to submit, so slow links, throttling and contention all
  count), smoothed by an exponential moving average;
* **the need** — from the learner's measured step time and dissemination latency,
  :func:`echo2.planning.capacity.provisioning_need` gives the aggregate throughput that keeps the
  learner at the target utilization (times ``headroom``); when no available set can reach it
  (dissemination-bound, e.g. S = 0 or a slow uplink, or too few workers) it aims for
  ``reachable_share`` of the utilization unlimited throughput would give;
* **the choice** (:func:`decide`) — :func:`echo2.planning.activation.choose_active` picks the
  cheapest measured set that meets the need, the workers active now weighed ``switch_margin``
  cheaper (:func:`incumbent_price`: no switching on noise); a worker not yet measured is active
  on probation (so that it gets measured at all) while measuring it could change that choice
  (:func:`could_change`); only when even the reachable share is out of reach is every worker
  active.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from echo2.planning.activation import Candidate, choose_active
from echo2.planning.capacity import StepTimes, provisioning_need
from echo2.core.smoothing import ema

if TYPE_CHECKING:
    from echo2.config import ActivationRule

#: Weight of the newest lease in a worker's throughput average.
PROFILE_WEIGHT = 0.3


@dataclass(frozen=True)
class ActivationPolicy:
    enabled: bool
    rollouts_per_step: int
    staleness: int
    headroom: float = 1.1
    target_utilization: float = 1.0
    reachable_share: float = 0.95
    switch_margin: float = 0.05

    @classmethod
    def from_rule(cls, rule: ActivationRule, rollouts_per_step: int, staleness: int) -> ActivationPolicy:
        return cls(enabled=rule.enabled, rollouts_per_step=rollouts_per_step, staleness=staleness,
                   headroom=rule.headroom, target_utilization=rule.target_utilization,
                   reachable_share=rule.reachable_share, switch_margin=rule.switch_margin)


@dataclass(frozen=True)
class WorkerView:
    """What the rule needs to know of a live worker."""

    worker_id: str
    price_per_hour: float
    throughput: float | None
    """Profiled rollouts/s; None: not measured yet (on probation)."""
    active: bool = False
    """Active now (the incumbent set :func:`decide` prefers while it still covers the need)."""


@dataclass(frozen=True)
class Decision:
    active: frozenset[str]
    """Ids of the workers to keep active; every other live worker is parked."""
    need: float | None
    """Rollouts/s provisioned for (infinite: out of reach, everyone works; None: rule not applied)."""


def profile(previous: float | None, rollouts: int, wall_s: float) -> float | None:
    """A worker's throughput average after a lease of ``rollouts`` that took ``wall_s``."""
    if wall_s <= 0:
        return previous
    return ema(previous, rollouts / wall_s, PROFILE_WEIGHT)


def busy_seconds(now: float, granted_at: float, previous_submission_at: float) -> float:
    """How long a submitted lease kept its worker busy, for :func:`profile`: since its grant, or
    since the worker's previous submission when it was granted before that (a lease asked for
    ahead waits for the one before it to be generated: :mod:`echo2.rollout.lease_ahead`)."""
    return now - max(granted_at, previous_submission_at)


def decide(policy: ActivationPolicy, live: Sequence[WorkerView], train_s: float | None,
           broadcast_s: float | None) -> Decision:
    """Which of the ``live`` workers to keep active (see module docstring). Without a measured
    step time, or with the rule off, every live worker is active."""
    everyone = frozenset(w.worker_id for w in live)
    if not policy.enabled or train_s is None:
        return Decision(everyone, None)
    times = StepTimes(max(train_s, 1e-6), broadcast_s or 0.0, policy.rollouts_per_step, policy.staleness)
    probation = [w for w in live if w.throughput is None]
    measured = [w for w in live if w.throughput is not None]
    need = provisioning_need(times, sum(w.throughput or 0.0 for w in live), policy.target_utilization,
                             policy.headroom, policy.reachable_share)
    if math.isinf(need):
        return Decision(everyone, need)
    candidates = [Candidate(w.worker_id, incumbent_price(w, policy.switch_margin), w.throughput or 0.0)
                  for w in measured]
    choice = choose_active(candidates, need)  # workers on probation are not counted towards the need
    price = sum(w.price_per_hour for w in measured if w.worker_id in choice.active)  # the real one
    trying = {w.worker_id for w in probation if could_change(w, choice.meets_requirement, price)}
    return Decision(frozenset(choice.active) | trying, need)


def incumbent_price(worker: WorkerView, margin: float) -> float:
    """The price the choice weighs ``worker`` at: a worker active now at ``1 / (1 + margin)`` of its
    own, so that a set of them is kept unless another saves more than ``margin``.

    Throughput estimates are moving averages and the need follows the learner's measured step and
    dissemination times, so the cheapest cover changes with noise: among workers of one price a
    slightly faster estimate swaps one worker for several others, and a scale-down picks its
    survivors anew instead of parking the surplus. Weighing incumbents lower makes a scale-down
    park from the active set, a swap wait until it pays, and leaves scaling up immediate (the
    incumbents alone no longer cover the need). Billing still uses the real price.
    """
    return worker.price_per_hour / (1 + margin) if worker.active else worker.price_per_hour


def could_change(worker: WorkerView, covered: bool, price: float) -> bool:
    """Whether measuring an unmeasured ``worker`` could change the choice: the measured set chosen,
    which ``covered`` the need or not, at a total ``price`` per hour.

    Probation exists so a worker gets measured at all; it is worth its bill only while the result
    could matter. When the measured set falls short of the need, every worker could. When it covers
    the need, the best an unmeasured worker could do, at any throughput, is replace the whole
    chosen set alone: so it is kept on probation only if its price is below the set's total (or it
    is free, which the choice would take at no cost). Otherwise it waits parked, measured never,
    billed never, until a death or a larger need leaves the measured set short. Without this end, a
    worker that never gets a lease (one a relay hop behind a worker that fills the window alone,
    docs/capacity.md) stayed active and billed all run.
    """
    return not covered or worker.price_per_hour == 0 or worker.price_per_hour < price
