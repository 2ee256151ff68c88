"""The coordinator's book of published versions: hash and size, relay plan, dissemination times.

Not locked on its own: :class:`echo2.coordinator.state.CoordinatorState` calls it under its lock.
Only the versions a worker may still use are kept (:func:`echo2.core.staleness.versions_in_use`).
"""

from __future__ import annotations

import time

from echo2.broadcast.topology import Node, Plan, Planner
from echo2.protocol import LEARNER_SOURCE, VersionInfo
from echo2.core.staleness import versions_in_use


class VersionBook:
    def __init__(self, planner: Planner, staleness: int) -> None:
        self.planner, self.staleness = planner, staleness
        self.published: dict[int, VersionInfo] = {}
        self.published_at: dict[int, float] = {}
        self.plans: dict[int, Plan] = {}
        self._load_times: dict[int, dict[str, float]] = {}  # version -> worker id -> when it loaded

    def publish(self, info: VersionInfo, live: list[Node]) -> None:
        """Record ``info.version`` and plan who relays it to whom among the ``live`` workers (one
        that joins later fetches from the learner). A version's delta travels the same plan."""
        version = info.version
        previous = self.plans[max(self.plans)] if self.plans else {}
        self.plans[version] = self.planner(live, list(previous))
        self.published[version] = info
        self.published_at[version] = time.time()
        if live:  # dissemination is measured from publish to the workers live at that moment
            self._load_times[version] = {}
        for table in (self.plans, self.published, self.published_at, self._load_times):
            for old in [v for v in table if v <= version - versions_in_use(self.staleness)]:
                del table[old]

    def info_for(self, version: int, worker_id: str, relay_urls: dict[str, str]) -> VersionInfo:
        """``version`` with the sources ``worker_id`` should fetch it from: its relay chain, then the learner."""
        chain = [relay_urls[s] for s in self.plans.get(version, {}).get(worker_id, []) if s in relay_urls]
        return self.published[version].model_copy(update={"sources": [*chain, LEARNER_SOURCE]})

    def loaded(self, version: int, worker_id: str, at: float) -> None:
        if version in self._load_times:
            self._load_times[version][worker_id] = at

    def spreading(self) -> bool:
        """Whether a version's dissemination is still being measured (see :meth:`pop_disseminated`)."""
        return bool(self._load_times)

    def pop_disseminated(self, live_loaded_versions: list[int]) -> list[tuple[int, float, float]]:
        """Versions every live worker now holds (or has skipped past): ``(version, published, last loaded)``.

        Dissemination latency of a version = its publish time to the moment the last live worker
        that loaded it finished (a worker that went straight to a newer version is not waited for).
        Times are wall-clock ``time.time()`` of the worker's fetch events, so remote workers need
        synchronised clocks (NTP) for the figure to be exact.
        """
        done = []
        for version in sorted(self._load_times):
            if any(held < version for held in live_loaded_versions):
                continue
            loads = self._load_times.pop(version)
            if loads:  # else every worker went straight past it: nothing to measure
                done.append((version, self.published_at[version], max(loads.values())))
        return done
