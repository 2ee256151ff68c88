"""When a published version has reached the whole fleet: the one rule behind the dissemination figure.

ECHO-2's dissemination latency (arXiv 2602.02192, the overlap model's ``T_bcast``) is the time from
a version's publish to the moment every counted worker holds it or a newer one. The coordinator
feeds this census with its workers' fetch events and deaths, the simulator with its simulated ones;
both read the same figure from it. Pure: no clock (every event carries its time), no threads, no I/O.

Which workers count is the caller's to say; the coordinator and the simulator say the same: a live
(running) worker from its first load on, until it dies, leaves or is parked (it generates nothing,
so the figure does not wait for it). :meth:`DisseminationCensus.hold` with ``None`` takes a worker
out. A version no worker loaded itself (every worker went straight past it) reaches the
fleet unmeasured. Event times may arrive out of order (remote workers report in batches): a
version's time is the latest of the moments each counted worker first held it or a newer one, and
never earlier than the event that completed it.

Each counted worker's own dissemination time is kept too (:attr:`DisseminationCensus.arrival_s`):
activation weighs the dissemination time of a set it could choose by its members' own (the
slowest of them), not by the set that happened to be active (``planning/activation_rule.py``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from echo2.core.smoothing import EMA_WEIGHT, ema


@dataclass(frozen=True)
class Reached:
    """``version``, published at ``published``, held by the whole fleet at ``reached``."""

    version: int
    published: float
    reached: float


class DisseminationCensus:
    def __init__(self, start: float = 0.0) -> None:
        self.published_at: dict[int, float] = {0: start}
        """Publish time of every version not yet reached by the fleet (and of the newest)."""
        self.newest = 0
        self.reached_through = 0
        """Every version up to this one has reached the fleet."""
        self.holding: dict[Hashable, int] = {}
        """The version each counted worker holds."""
        self._first_held: dict[Hashable, dict[int, float]] = {}
        """Per counted worker: when it first held each unreached version (or a newer one)."""
        self._loaded: set[int] = {0}
        """Unreached versions some worker loaded itself."""
        self.arrival_s: dict[Hashable, float] = {}
        """Per worker, counted now or before: the smoothed age of each version it gets when it gets
        it (its own dissemination time; kept while it does not count, e.g. parked, for the choice
        that could activate it again). The age of the version got, not of the first one it lacked:
        a worker on a busy link skips versions, and what bounds its data's staleness is how old
        the version it generates with is. Timed from the first version lacked, the 4B scenario with
        its workers at half speed kept its learner 89% busy; timed by the age of what they got, 99.5%."""

    def forget(self, worker: Hashable) -> None:
        """Drop ``worker``'s own dissemination time (activation measures it anew)."""
        self.arrival_s.pop(worker, None)

    def publish(self, version: int, at: float) -> None:
        self.published_at[version] = at
        self.newest = max(self.newest, version)

    def loaded(self, version: int) -> None:
        """A worker loaded ``version`` itself (so its spread is measured)."""
        if version > self.reached_through:
            self._loaded.add(version)

    def fleet_version(self) -> int:
        """The newest version the whole fleet holds (or a newer one): the oldest any counted worker
        holds; the newest published when none counts."""
        return min(self.holding.values()) if self.holding else self.newest

    def spreading(self) -> bool:
        """Whether a published version has yet to reach some counted worker."""
        return self.fleet_version() < self.newest

    def hold(self, worker: Hashable, version: int | None, at: float) -> list[Reached]:
        """``worker`` holds ``version`` from ``at`` on (``None``: it no longer counts); the versions
        that have now reached every counted worker (all published ones when none counts)."""
        if self.holding.get(worker) == version:
            return []
        if version is None:
            self.holding.pop(worker, None)
            self._first_held.pop(worker, None)
        else:
            before = self.holding.get(worker)
            published = self.published_at.get(version) if before is not None and before < version else None
            if published is not None:  # a spread, not a (re)joining worker's first load
                self.arrival_s[worker] = ema(self.arrival_s.get(worker), max(at - published, 0.0), EMA_WEIGHT)
            self.holding[worker] = version
            first = self._first_held.setdefault(worker, {})
            for gone in [v for v in first if v > version]:
                del first[gone]
            for v in range(self.reached_through + 1, version + 1):
                first.setdefault(v, at)
        oldest = self.fleet_version()
        done = []
        for version_reached in range(self.reached_through + 1, oldest + 1):
            if version_reached in self._loaded:
                times = [first[version_reached] for first in self._first_held.values() if version_reached in first]
                done.append(Reached(version_reached, self.published_at[version_reached], max([at, *times])))
        if oldest > self.reached_through:
            self._forget_through(oldest)
        return done

    def _forget_through(self, version: int) -> None:
        self.reached_through = version
        self._loaded = {v for v in self._loaded if v > version}
        self.published_at = {v: t for v, t in self.published_at.items() if v > version or v == self.newest}
        for first in self._first_held.values():
            for v in [v for v in first if v <= version]:
                del first[v]
