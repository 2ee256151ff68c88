"""The provisioning rule of cost-aware activation, on a small view of each worker.

ECHO-2 provisions just enough rollout capacity to keep the learner busy. This is the rule, with
no clock and no coordinator in it, so that a live run (``coordinator/fleet.py``) and a simulated
one (``simulation/engine.py``) decide with the same function:

* **profiling** (:func:`profile`) — each submitted lease gives a worker's throughput over its
  whole lease cycle (:class:`LeaseCycle`: from its previous submission, so swapping a version in,
  slow links, throttling and contention all count; the coordinator's holds and waits for a
  version do not), smoothed as seconds per rollout;
* **the need** — from the learner's measured step time and each worker's own dissemination time,
  the capacity model (:mod:`echo2.planning.capacity`) gives, for each dissemination time a set
  could have (:func:`dissemination_options`), the aggregate throughput that keeps the learner at
  the target utilization (times ``headroom``); when no set reaches it (dissemination-bound, e.g.
  S = 0 or a slow uplink, or too few workers) all aim for the best any reaches up to
  ``reachable_share`` of its ceiling (:func:`common_aim`);
* **the choice** (:func:`decide`) — :func:`echo2.planning.activation.choose_active` picks the
  cheapest measured set that meets its need, the workers active now weighed ``switch_margin``
  cheaper (:func:`incumbent_price`) and a scale-down made only when it saves more than that
  (:func:`worth_scaling_down`): no switching on noise; a worker not yet measured is active on
  probation (so that it gets measured at all) while measuring it could change that choice
  (:func:`could_change`); only when nothing is measured is every worker active.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from echo2.planning.activation import Activation, Candidate, choose_active
from echo2.planning.capacity import StepTimes, knee_utilization, predicted_utilization, required_throughput
from echo2.core.smoothing import ema

if TYPE_CHECKING:
    from echo2.config import ActivationRule

#: Weight of the newest lease in a worker's throughput average.
PROFILE_WEIGHT = 0.3
#: Most dissemination times :func:`dissemination_options` weighs in one choice (one cover each).
MAX_OPTIONS = 6


@dataclass(frozen=True)
class ActivationPolicy:
    enabled: bool
    rollouts_per_step: int
    staleness: int
    headroom: float = 1.1
    target_utilization: float = 1.0
    reachable_share: float = 0.95
    switch_margin: float = 0.25

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
    arrival_s: float | None = None
    """Its own dissemination time, smoothed (:attr:`echo2.core.dissemination.DisseminationCensus.arrival_s`);
    None: not timed yet."""


@dataclass(frozen=True)
class Decision:
    active: frozenset[str]
    """Ids of the workers to keep active; every other live worker is parked."""
    need: float | None
    """Rollouts/s provisioned for (infinite: out of reach, everyone works; None: rule not applied)."""


def profile(previous: float | None, rollouts: int, wall_s: float) -> float | None:
    """A worker's throughput average after a lease of ``rollouts`` that took ``wall_s``.

    Averaged as seconds per rollout, not rollouts per second: cycles differ (one swaps a new
    version in, the next does not; generation times spread), and a mean of rates over-states the
    rate that sums of rollouts over sums of seconds give, which is what the fleet delivers."""
    if wall_s <= 0 or rollouts <= 0:
        return previous
    seconds = ema(None if previous is None else 1 / previous, wall_s / rollouts, PROFILE_WEIGHT)
    return 1 / seconds


def busy_seconds(now: float, granted_at: float, cycle_began_at: float | None) -> float:
    """How long a lease submitted ``now`` kept its worker, for :func:`profile`: its whole cycle
    (:class:`LeaseCycle`), from the grant for a worker's first lease.

    The cycle, not grant to submit: between two leases a worker swaps the version it fetched into
    its engine and asks again, and the fluid model's ``R / sum(mu)`` has no other place for that
    time. Measured from the grant, the 30B scenario's workers (30 s to load 61 GB, steps of about
    100 s, 24% of their active time between leases) were profiled faster than they delivered, and
    the fleet chosen to cover the requirement kept the learner busy 82% of the time. A lease asked
    for ahead is granted while the one before is generated: its cycle begins at that one's
    submission all the same."""
    return now - (granted_at if cycle_began_at is None else cycle_began_at)


@dataclass
class LeaseCycle:
    """Where a worker's current lease cycle began, for :func:`busy_seconds`: at its latest
    submission, or later where it was sent away for what is not its own generation's doing.

    An answer ``wait`` or ``parked`` (the coordinator holds the request: a full window, parking)
    or ``refresh`` (its weights are too old: it waits for a version, which the fluid model counts
    in ``T_bcast``) pauses the cycle; the grant that ends the pause begins it again. Counting the
    wait for a version as generation time profiled the 1000-worker scenario's workers (44% of
    their active time waiting for staged versions) at under half their rate and ran a third more
    of them than the fleet needed."""

    began_at: float | None = None
    """None before the first submission."""
    paused: bool = False

    def answered(self, status: str, now: float) -> None:
        """A lease request of the worker was answered ``status`` at ``now``."""
        if status in ("wait", "parked", "refresh"):
            self.paused = True
        elif status == "granted" and self.paused:
            self.paused = False
            if self.began_at is not None:
                self.began_at = now

    def submitted(self, now: float, granted_at: float, rollouts: int, throughput: float | None) -> float | None:
        """A lease of ``rollouts`` granted at ``granted_at`` was submitted ``now``: the worker's
        ``throughput`` with this cycle folded in (:func:`profile` over :func:`busy_seconds`, the one
        step the coordinator and the simulator both take); the next cycle begins now."""
        busy_s = busy_seconds(now, granted_at, self.began_at)
        self.began_at = now
        return profile(throughput, rollouts, busy_s)


def decide(policy: ActivationPolicy, live: Sequence[WorkerView], train_s: float | None,
           broadcast_s: float | None) -> Decision:
    """Which of the ``live`` workers to keep active (see module docstring). Without a measured
    step time, or with the rule off, every live worker is active. ``broadcast_s``: the measured
    dissemination time, standing in for a worker's own (:attr:`WorkerView.arrival_s`) until that
    is measured."""
    everyone = frozenset(w.worker_id for w in live)
    if not policy.enabled or train_s is None:
        return Decision(everyone, None)
    probation = [w for w in live if w.throughput is None]
    measured = [w for w in live if w.throughput is not None]
    train_s, broadcast_s = max(train_s, 1e-6), broadcast_s or 0.0
    options = dissemination_options(policy, measured, train_s, broadcast_s)
    aim = common_aim(policy, options)
    cheapest = cheapest_cover(policy, options, aim) if aim is not None else None
    if cheapest is None:  # nothing measured (or, by rounding, nothing reaches the aim): every worker works
        return Decision(everyone, math.inf)
    choice, need = cheapest
    chosen = frozenset(choice.active)
    incumbents = [w for w in measured if w.active]
    at_their_time = step_times(policy, train_s, set_latency(incumbents, broadcast_s))
    if chosen < {w.worker_id for w in incumbents} and not worth_scaling_down(policy, incumbents, chosen,
                                                                             at_their_time, aim):
        chosen = frozenset(w.worker_id for w in incumbents)
    price = sum(w.price_per_hour for w in measured if w.worker_id in chosen)  # the real one
    reached = aim >= policy.target_utilization  # else the measured workers fall short: each newcomer could help
    trying = {w.worker_id for w in probation if could_change(w, reached, price)}
    return Decision(chosen | trying, need)


def cheapest_cover(policy: ActivationPolicy, options: Sequence[DisseminationOption],
                   aim: float) -> tuple[Activation, float] | None:
    """The cheapest set (and the need it covers) among the options that can reach ``aim``: each
    option's workers at its dissemination time, incumbents weighed :func:`incumbent_price`."""
    best: tuple[Activation, float] | None = None
    for option in options:
        need = required_throughput(option.times, aim) * policy.headroom
        if need > option.throughput * (1 + 1e-9):  # (all of an option's workers: equal but for rounding)
            continue
        choice = choose_active([Candidate(w.worker_id, incumbent_price(w, policy.switch_margin), w.throughput or 0.0)
                                for w in option.workers], need)
        if best is None or (choice.price_per_hour, -choice.throughput) < (best[0].price_per_hour, -best[0].throughput):
            best = (choice, need)
    return best


def step_times(policy: ActivationPolicy, train_s: float, broadcast_s: float) -> StepTimes:
    return StepTimes(train_s, broadcast_s, policy.rollouts_per_step, policy.staleness)


def worth_scaling_down(policy: ActivationPolicy, incumbents: Sequence[WorkerView], chosen: frozenset[str],
                       times: StepTimes, aim: float) -> bool:
    """Whether to park the ``incumbents`` (the measured workers active now) not ``chosen``: only
    when that saves more than ``switch_margin`` of their price, or they no longer reach the ``aim``
    at their own dissemination time (``times``).

    The cheapest cover of the need is as tight as the throughput estimates allow, and they move
    from lease to lease (a cycle that swaps a version in is slower than one that does not): a
    scale-down by a worker or two parked what the next re-plan activated again. The margin that
    keeps a swap from happening on noise (:func:`incumbent_price`) keeps these too."""
    price = sum(w.price_per_hour for w in incumbents)
    saved = sum(w.price_per_hour for w in incumbents if w.worker_id not in chosen)
    covered = required_throughput(times, aim) * policy.headroom <= sum(w.throughput or 0.0 for w in incumbents)
    return not covered or saved > policy.switch_margin * price


@dataclass(frozen=True)
class DisseminationOption:
    """Choosing only among ``workers``, each holding a version within ``times.broadcast_s`` of its
    publish: the step times a set of them would run at, and all the throughput they have."""

    times: StepTimes
    workers: tuple[WorkerView, ...]
    throughput: float


def common_aim(policy: ActivationPolicy, options: Sequence[DisseminationOption]) -> float | None:
    """The utilization every option is asked to reach: the target when some option reaches it
    (with ``headroom``), else the best any option reaches up to its knee; None when none reaches
    any (no throughput measured).

    Per option this is :func:`echo2.planning.capacity.provisioning_need`'s aim (the target; else
    ``reachable_share`` of the ceiling unlimited throughput would give at that dissemination time,
    near which each added worker buys ever less; else, when not even that is in reach, all the
    option's workers), and the rule aims for the best of them. Aiming instead for the share of the
    best any option reaches parked workers where the learner, the dearest machine, then idled: the
    4B scenario at S = 0 ran 36 of 64 workers at 0.27 utilization, dearer than all 64 at 0.38."""
    def reaches(option: DisseminationOption) -> float:
        full = predicted_utilization(option.times, option.throughput / policy.headroom)
        if full >= policy.target_utilization:
            return policy.target_utilization
        return min(full, knee_utilization(option.times, policy.target_utilization, policy.reachable_share))

    best = max((reaches(option) for option in options), default=0.0)
    return best if best > 0 else None


def dissemination_options(policy: ActivationPolicy, measured: Sequence[WorkerView], train_s: float,
                          broadcast_s: float) -> list[DisseminationOption]:
    """The dissemination times the choice weighs, each with the measured workers a set
    disseminating within it may take: a set's dissemination time is its slowest member's
    (:attr:`WorkerView.arrival_s`; ``broadcast_s``, the measured one, for a worker not yet timed).

    Why not the measured time alone: it is the time to the last worker *active*, so it follows the
    set. Near the dissemination bound, a larger set measured slower asked for more throughput or,
    past the bound, for less (the reachable share of a lower ceiling), and the next re-plan undid
    the last: the 4B scenario swung between 26 and 63 active workers every few re-plans
    (docs/simulation.md). Weighing each candidate set at its own members' times ends the loop.
    At most :data:`MAX_OPTIONS` times are tried (quantiles of the workers' times, the slowest always).
    """
    def latency(worker: WorkerView) -> float:
        return set_latency([worker], broadcast_s)

    times = sorted({latency(w) for w in measured})
    if len(times) > MAX_OPTIONS:
        times = sorted({times[round(k * (len(times) - 1) / (MAX_OPTIONS - 1))] for k in range(MAX_OPTIONS)})
    options = []
    for limit in times:
        workers = tuple(w for w in measured if latency(w) <= limit)
        options.append(DisseminationOption(step_times(policy, train_s, limit), workers,
                                           sum(w.throughput or 0.0 for w in workers)))
    return options


def set_latency(workers: Sequence[WorkerView], broadcast_s: float) -> float:
    """A set's dissemination time: its slowest member's own (``broadcast_s``, the measured one, for
    a member not yet timed)."""
    return max((w.arrival_s if w.arrival_s is not None else broadcast_s for w in workers), default=broadcast_s)


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
