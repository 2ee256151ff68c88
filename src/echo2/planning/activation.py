"""Cost-aware activation: the cheapest set of workers whose throughput meets a requirement.

Choosing which workers to run is a *minimum-cost covering knapsack*: minimise the summed hourly
price of the active set ``A`` subject to ``sum_{i in A} mu_i >= need`` (the requirement comes from
:func:`echo2.planning.capacity.required_throughput`). It is NP-hard in general, so echo2 solves it
by dynamic programming over throughput rounded *down* to ``need / resolution`` units:

* every set it returns truly meets the requirement (rounding down only under-counts), and
* its cost is at most that of the cheapest set meeting ``need + |A*| * need / resolution`` with
  exact throughputs (each member loses less than one unit), i.e. the optimum for a requirement
  raised by at most ``|A*| / resolution``: 0.5% for 10 workers at the default resolution.

The DP runs in ``O(n * resolution)`` (one vectorised round per candidate: 1000 candidates in tens of
milliseconds, so the simulator can re-plan as often as the coordinator); ties in cost go to the set
with more throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """A worker that could be activated."""

    name: str
    price_per_hour: float
    """Dollars per hour while active (parked workers are assumed released or idle-priced at 0)."""
    throughput: float
    """Expected rollouts per second when active (after any preemption discount)."""


@dataclass(frozen=True)
class Activation:
    active: tuple[str, ...]
    """Names of the chosen workers, in input order."""
    price_per_hour: float
    throughput: float
    meets_requirement: bool
    """False when even the whole fleet falls short (then everything is activated)."""


def choose_active(candidates: Sequence[Candidate], need: float, resolution: int = 2000) -> Activation:
    """The cheapest subset of ``candidates`` with summed throughput >= ``need`` (see module doc)."""
    if resolution < 1:
        raise ValueError(f"resolution must be >= 1, got {resolution}")
    total = sum(c.throughput for c in candidates)
    if need <= 0:
        return Activation((), 0.0, 0.0, True)
    if math.isinf(need) or total < need:
        return _summarise(candidates, range(len(candidates)), need)
    unit = need / resolution
    units = [min(resolution, math.floor(c.throughput / unit)) for c in candidates]
    cost = np.full(resolution + 1, np.inf)
    cost[0] = 0.0
    throughput = np.zeros(resolution + 1)
    taken = np.zeros((len(candidates), resolution + 1), dtype=bool)
    top_source = np.zeros(len(candidates), dtype=np.int64)
    for index in _contenders(candidates, units, resolution):
        top_source[index] = _add(cost, throughput, taken[index], units[index], candidates[index])
    if math.isinf(cost[resolution]):  # rounding lost the last sliver: fall back to the whole fleet
        return _summarise(candidates, range(len(candidates)), need)
    indices, k = [], resolution
    for index in range(len(candidates) - 1, -1, -1):
        if taken[index, k]:
            indices.append(index)
            k = int(top_source[index]) if k == resolution else k - units[index]
    return _summarise(candidates, sorted(indices), need)


def _contenders(candidates: Sequence[Candidate], units: list[int], resolution: int) -> list[int]:
    """Indices (in input order) of the candidates the DP must consider.

    A candidate adding no counted unit but some cost never helps. And a cheapest set is minimal
    (dropping a priced member breaks the cover), so it has fewer than ``resolution / u_min + 1``
    priced members, ``u_min`` the smallest unit count: of the candidates at one price, only that
    many with the most units (then throughput) can be needed; any other is matched by an unused one
    of them at equal cost and no less throughput. This keeps the DP fast for a thousand workers of a
    few classes without changing the optimum.
    """
    priced = [i for i, c in enumerate(candidates) if c.price_per_hour > 0 and units[i] > 0]
    free = [i for i, c in enumerate(candidates) if c.price_per_hour <= 0]
    if not priced:
        return free
    bound = resolution // min(units[i] for i in priced) + 1
    by_price: dict[float, list[int]] = {}
    for index in priced:
        by_price.setdefault(candidates[index].price_per_hour, []).append(index)
    kept = [i for group in by_price.values()
            for i in sorted(group, key=lambda i: (-units[i], -candidates[i].throughput, i))[:bound]]
    return sorted(free + kept)


def _add(cost: np.ndarray, throughput: np.ndarray, taken: np.ndarray, units: int, candidate: Candidate) -> int:
    """One 0/1-knapsack round, in place: ``cost[k]``/``throughput[k]`` describe the cheapest set reaching
    at least ``k`` units (ties: more throughput); every option reads the previous round's values.
    Marks in ``taken`` the ``k`` whose best set now includes ``candidate``; returns the source ``k``
    of the set that reaches the top (all ``k >= top - units`` reach it)."""
    top = len(cost) - 1
    low = top - units
    price, rate = candidate.price_per_hour, candidate.throughput
    # the top: the best of the sources that reach it (ties to the highest source, as a downward scan finds it)
    reach_cost = cost[low:] + price
    ties = np.flatnonzero(reach_cost == reach_cost.min())
    reach_throughput = throughput[low:][ties] + rate
    pick = int(ties[np.flatnonzero(reach_throughput == reach_throughput.max())[-1]])
    top_cost, top_throughput = reach_cost[pick], throughput[low + pick] + rate
    top_better = bool(_better(np.array([top_cost]), np.array([top_throughput]), cost[top:], throughput[top:])[0])
    # below the top, source k reaches k + units
    option_cost, option_throughput = cost[:low] + price, throughput[:low] + rate
    better = _better(option_cost, option_throughput, cost[units:top], throughput[units:top])
    np.copyto(cost[units:top], option_cost, where=better)
    np.copyto(throughput[units:top], option_throughput, where=better)
    taken[units:top] = better
    if top_better:
        cost[top], throughput[top], taken[top] = top_cost, top_throughput, True
    return low + pick


def _better(cost: np.ndarray, throughput: np.ndarray, than_cost: np.ndarray, than_throughput: np.ndarray) -> np.ndarray:
    """Strictly cheaper, or as cheap with more throughput (infeasible options never win)."""
    return np.isfinite(cost) & ((cost < than_cost) | ((cost == than_cost) & (throughput > than_throughput)))


def _summarise(candidates: Sequence[Candidate], indices, need: float) -> Activation:
    picked = [candidates[i] for i in indices]
    throughput = sum(c.throughput for c in picked)
    return Activation(tuple(c.name for c in picked), sum(c.price_per_hour for c in picked), throughput,
                      throughput >= need)
