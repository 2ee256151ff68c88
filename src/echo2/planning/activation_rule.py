"""The provisioning rule of cost-aware activation, on a small view of each worker.

ECHO-2 provisions just enough rollout capacity to keep the learner busy. This is the rule, with
no clock and no coordinator in it, so that a live run (``coordinator/fleet.py``) and a simulated
one (``simulation/engine.py``) decide with the same function:

* **profiling** (:mod:`echo2.core.profiling`) — each submitted lease gives a worker's
  throughput over its whole lease cycle, smoothed as seconds per rollout;
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
  (:func:`could_change`); only when nothing is measured is every worker active;
* **forgetting** (:func:`stale`) — a worker parked ``remeasure_after_s`` is measured again, one
  at a time (:func:`stale_to_retry`): activated on probation, its old measurements dropped
  (:attr:`Decision.remeasure`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from echo2.core.dissemination import DisseminationCensus
from echo2.core.run_clock import RunClock
from echo2.planning.activation import Activation, Candidate, choose_active
from echo2.planning.capacity import StepTimes, knee_utilization, predicted_utilization, required_throughput

if TYPE_CHECKING:
    from echo2.config import ActivationRule

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
    remeasure_after_s: float = 300.0

    @classmethod
    def from_rule(cls, rule: ActivationRule, rollouts_per_step: int, staleness: int) -> ActivationPolicy:
        return cls(enabled=rule.enabled, rollouts_per_step=rollouts_per_step, staleness=staleness,
                   headroom=rule.headroom, target_utilization=rule.target_utilization,
                   reachable_share=rule.reachable_share, switch_margin=rule.switch_margin,
                   remeasure_after_s=rule.remeasure_after_s)


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
    parked_s: float | None = None
    """How long it has been parked (None: active, or never parked): past the policy's
    ``remeasure_after_s`` its measurements are stale (:func:`stale`)."""


@dataclass(frozen=True)
class Decision:
    active: frozenset[str]
    """Ids of the workers to keep active; every other live worker is parked."""
    need: float | None
    """Rollouts/s provisioned for (infinite: out of reach, everyone works; None: rule not applied)."""
    remeasure: frozenset[str] = frozenset()
    """Parked workers activated again on probation because their measurements were stale: the
    caller forgets their throughput and dissemination time, so that what they do now decides."""


def stale(policy: ActivationPolicy, worker: WorkerView) -> bool:
    """Whether ``worker``'s measurements are too old to decide by: it has been parked
    ``remeasure_after_s`` or longer, and a parked worker is neither profiled nor timed.

    Why forget: the choice parks a worker on its estimates, and a parked worker's estimates never
    change again, so one slow first lease or one fetch stalled behind a trickling relay parked an
    honest worker for the rest of the run. A stale worker is measured again where that could change
    the choice (:func:`could_change`), one at a time (:func:`stale_to_retry`); parked otherwise."""
    return not worker.active and worker.parked_s is not None and worker.parked_s >= policy.remeasure_after_s


class Activatable(Protocol):
    """A worker as the coordinator's registry and the simulator both keep it."""

    worker_id: str
    price_per_hour: float
    throughput: float | None
    active: bool
    parked_at: float | None
    """When activation parked it (None: active, or never parked), in the caller's clock."""


def view(worker: Activatable, arrivals: Mapping[str, float], now: float) -> WorkerView:
    """What :func:`decide` sees of ``worker`` at ``now`` (``arrivals``: the census's own times)."""
    parked_s = None if worker.active or worker.parked_at is None else now - worker.parked_at
    return WorkerView(worker.worker_id, worker.price_per_hour, worker.throughput, worker.active,
                      arrivals.get(worker.worker_id), parked_s)


def apply(decision: Decision, workers: Sequence[Activatable], forget_arrival: Callable[[str], None],
          now: float) -> list[Activatable]:
    """Make ``decision`` so on ``workers`` at ``now``: the ones to remeasure lose their throughput
    and (``forget_arrival``) their dissemination time; the ones whose state changes are returned."""
    changed = []
    for worker in workers:
        if worker.worker_id in decision.remeasure:
            worker.throughput = None
            forget_arrival(worker.worker_id)
        active = worker.worker_id in decision.active
        if active != worker.active:
            worker.active, worker.parked_at = active, None if active else now
            changed.append(worker)
    return changed


def replan(policy: ActivationPolicy, live: Sequence[Activatable], clock: RunClock, census: DisseminationCensus,
           now: float) -> tuple[Decision, list[Activatable]]:
    """Re-decide which of the ``live`` workers are active at ``now`` with the run clock's step and
    dissemination times and each worker's own (``census``), and make it so: the decision and the
    workers whose state changed. The coordinator and the simulator both re-plan here."""
    decision = decide(policy, [view(w, census.arrival_s, now) for w in live], clock.train_s, clock.broadcast_s)
    return decision, apply(decision, live, census.forget, now)


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
    retried = stale_to_retry(policy, measured, probation, reached, price)
    return Decision(chosen | trying | retried, need, retried)


def stale_to_retry(policy: ActivationPolicy, measured: Sequence[WorkerView], probation: Sequence[WorkerView],
                   covered: bool, price: float) -> frozenset[str]:
    """The one stale worker (:func:`stale`) to measure again now: the longest parked of those whose
    measure could change the choice (:func:`could_change`), and only while no worker is on
    probation already; none otherwise.

    One at a time: in the 1000-worker consumer scenario every parked worker fell stale together,
    and weighing each as a new one put them all on probation at once — 400 workers active on
    average where 60 cover the need, 3.49x the centralized dollars instead of 1.04x. Retried one
    by one, a worker parked on an estimate that no longer holds is still measured again within
    its turn, and the bill is one worker's probation at a time."""
    if any(w.active for w in probation):
        return frozenset()
    candidates = [w for w in measured if stale(policy, w) and could_change(w, covered, price)]
    if not candidates:
        return frozenset()
    return frozenset({max(candidates, key=lambda w: (w.parked_s or 0.0, w.worker_id)).worker_id})


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
    keeps a swap from happening on noise (:func:`incumbent_price`) keeps these too.

    Parking what costs nothing saves nothing, so it never happens here, whatever the incumbents'
    dissemination time: a free worker holding a version late only generates data of that version,
    which the window's staleness bound already judges. Without that end, one fetch stalled behind
    a trickling relay made a $0/h worker's set miss the aim at its time, and it stayed parked:
    3.7 learner steps/s before, 1.0-1.4 for the next 9.7 minutes."""
    price = sum(w.price_per_hour for w in incumbents)
    saved = sum(w.price_per_hour for w in incumbents if w.worker_id not in chosen)
    covered = required_throughput(times, aim) * policy.headroom <= sum(w.throughput or 0.0 for w in incumbents)
    return saved > 0 and (not covered or saved > policy.switch_margin * price)


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
