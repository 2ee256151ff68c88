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
    for index, candidate in enumerate(candidates):
        if units[index] == 0 and candidate.price_per_hour > 0:
            continue  # adds no counted throughput, only cost
        top_source[index] = _add(cost, throughput, taken[index], units[index], candidate)
    if math.isinf(cost[resolution]):  # rounding lost the last sliver: fall back to the whole fleet
        return _summarise(candidates, range(len(candidates)), need)
    indices, k = [], resolution
    for index in range(len(candidates) - 1, -1, -1):
        if taken[index, k]:
            indices.append(index)
            k = int(top_source[index]) if k == resolution else k - units[index]
    return _summarise(candidates, sorted(indices), need)


def _add(cost: np.ndarray, throughput: np.ndarray, taken: np.ndarray, units: int, candidate: Candidate) -> int:
    """One 0/1-knapsack round, in place: ``cost[k]``/``throughput[k]`` describe the cheapest set reaching
    at least ``k`` units (ties: more throughput); every option reads the previous round's values.
    Marks in ``taken`` the ``k`` whose best set now includes ``candidate``; returns the source ``k``
    of the set that reaches the top (all ``k >= top - units`` reach it)."""
    top = len(cost) - 1
    option_cost, option_throughput = cost + candidate.price_per_hour, throughput + candidate.throughput
    # below the top, source k reaches k + units
    better = _better(option_cost[: top - units], option_throughput[: top - units], cost[units:top],
                     throughput[units:top])
    # the top: the best of the sources that reach it (ties to the highest source, as a downward scan finds it)
    sources = np.arange(top - units, top + 1)
    order = np.lexsort((-sources, -option_throughput[top - units:], option_cost[top - units:]))
    source = int(sources[order[0]])
    top_better = bool(_better(option_cost[source:source + 1], option_throughput[source:source + 1],
                              cost[top:], throughput[top:])[0])
    cost[units:top] = np.where(better, option_cost[: top - units], cost[units:top])
    throughput[units:top] = np.where(better, option_throughput[: top - units], throughput[units:top])
    taken[units:top] = better
    if top_better:
        cost[top], throughput[top], taken[top] = option_cost[source], option_throughput[source], True
    return source


def _better(cost: np.ndarray, throughput: np.ndarray, than_cost: np.ndarray, than_throughput: np.ndarray) -> np.ndarray:
    """Strictly cheaper, or as cheap with more throughput (infeasible options never win)."""
    return np.isfinite(cost) & ((cost < than_cost) | ((cost == than_cost) & (throughput > than_throughput)))


def _summarise(candidates: Sequence[Candidate], indices, need: float) -> Activation:
    picked = [candidates[i] for i in indices]
    throughput = sum(c.throughput for c in picked)
    return Activation(tuple(c.name for c in picked), sum(c.price_per_hour for c in picked), throughput,
                      throughput >= need)
