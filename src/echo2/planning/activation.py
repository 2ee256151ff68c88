"""Cost-aware activation: the cheapest set of workers whose throughput meets a requirement.

Choosing which workers to run is a *minimum-cost covering knapsack*: minimise the summed hourly
price of the active set ``A`` subject to ``sum_{i in A} mu_i >= need`` (the requirement comes from
:func:`echo2.planning.capacity.required_throughput`). It is NP-hard in general, so echo2 solves it
by dynamic programming over throughput rounded *down* to ``need / resolution`` units:

* every set it returns truly meets the requirement (rounding down only under-counts), and
* its cost is at most that of the cheapest set meeting ``need + |A*| * need / resolution`` with
  exact throughputs (each member loses less than one unit), i.e. the optimum for a requirement
  raised by at most ``|A*| / resolution``: 0.5% for 10 workers at the default resolution.

The DP runs in ``O(n * resolution)``; ties in cost go to the set with more throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
    # best[k] = (cost, -throughput, chosen) of the cheapest set reaching >= k units; ``chosen`` is a
    # linked list (index, rest) so that extending a set is O(1)
    best: list[tuple[float, float, tuple | None] | None] = [None] * (resolution + 1)
    best[0] = (0.0, 0.0, None)
    for index, candidate in enumerate(candidates):
        if units[index] == 0 and candidate.price_per_hour > 0:
            continue  # adds no counted throughput, only cost
        for k in range(resolution, -1, -1):  # 0/1 knapsack: iterate capacities downwards
            previous = best[k]
            if previous is None:
                continue
            reach = min(resolution, k + units[index])
            option = (previous[0] + candidate.price_per_hour, previous[1] - candidate.throughput,
                      (index, previous[2]))
            current = best[reach]
            if current is None or option[:2] < current[:2]:
                best[reach] = option
    chosen = best[resolution]
    if chosen is None:  # rounding lost the last sliver: fall back to the whole fleet
        return _summarise(candidates, range(len(candidates)), need)
    indices, node = [], chosen[2]
    while node is not None:
        indices.append(node[0])
        node = node[1]
    return _summarise(candidates, sorted(indices), need)


def _summarise(candidates: Sequence[Candidate], indices, need: float) -> Activation:
    picked = [candidates[i] for i in indices]
    throughput = sum(c.throughput for c in picked)
    return Activation(tuple(c.name for c in picked), sum(c.price_per_hour for c in picked), throughput,
                      throughput >= need)
