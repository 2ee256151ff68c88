"""The coordinator's book of published versions: hash and size, relay plan, dissemination times.

Not locked on its own: :class:`echo2.coordinator.state.CoordinatorState` calls it under its lock.
Only the versions a worker may still use are kept (:func:`echo2.core.staleness.versions_in_use`).
When a version has reached the fleet is :class:`echo2.core.dissemination.DisseminationCensus`'s
rule, the simulator's too: a live worker counts from its first load on, until it dies, leaves or is parked.
"""

from __future__ import annotations

import time

from echo2.broadcast.topology import Node, Plan, Planner
from echo2.core.dissemination import DisseminationCensus, Reached
from echo2.protocol import LEARNER_SOURCE, DeltaStep, VersionInfo
from echo2.core.staleness import versions_in_use


class VersionBook:
    def __init__(self, planner: Planner, staleness: int) -> None:
        self.planner, self.staleness = planner, staleness
        self.published: dict[int, VersionInfo] = {}
        self.published_at: dict[int, float] = {}
        self.plans: dict[int, Plan] = {}
        self.census = DisseminationCensus()
        self._reached: list[Reached] = []

    def publish(self, info: VersionInfo, live: list[Node]) -> None:
        """Record ``info.version`` and plan who relays it to whom among the ``live`` workers (one
        that joins later fetches from the learner). A version's delta travels the same plan."""
        version = info.version
        previous = self.plans[max(self.plans)] if self.plans else {}
        self.plans[version] = self.planner(live, list(previous))
        self.published[version] = info
        self.published_at[version] = time.time()
        self.census.publish(version, self.published_at[version])
        for table in (self.plans, self.published, self.published_at):
            for old in [v for v in table if v <= version - versions_in_use(self.staleness)]:
                del table[old]

    def info_for(self, version: int, worker_id: str, relay_urls: dict[str, str],
                 relay_rates: dict[str, float] | None = None) -> VersionInfo:
        """``version`` with the sources ``worker_id`` should fetch it from: its relay chain, then the
        learner, and the rate each relay of it is planned at (``relay_rates``, by URL)."""
        chain = [relay_urls[s] for s in self.plans.get(version, {}).get(worker_id, []) if s in relay_urls]
        rates = {url: relay_rates[url] for url in chain if relay_rates and relay_rates.get(url)}
        catch_up = [DeltaStep(version=v, sha256=info.sha256, delta_sha256=info.delta_sha256,
                              delta_bytes=info.delta_bytes or 0)
                    for v, info in sorted(self.published.items()) if v < version and info.delta_sha256]
        return self.published[version].model_copy(update={"sources": [*chain, LEARNER_SOURCE], "catch_up": catch_up,
                                                          "source_rates": rates})

    def chains_of(self, worker_id: str) -> list[str]:
        """Every worker id named in ``worker_id``'s chains of the versions kept."""
        return [source for plan in self.plans.values() for source in plan.get(worker_id, [])]

    def loaded(self, version: int, worker_id: str, at: float) -> None:
        """``worker_id`` finished loading ``version`` at ``at`` (its own clock: remote workers need
        synchronised clocks, NTP, for the figure to be exact)."""
        self.census.loaded(version)
        held = self.census.holding.get(worker_id, -1)
        self._reached += self.census.hold(worker_id, max(held, version), at)

    def gone(self, worker_id: str, at: float) -> None:
        """``worker_id`` died or left: the fleet no longer waits for it."""
        self._reached += self.census.hold(worker_id, None, at)

    def spreading(self) -> bool:
        """Whether a published version has yet to reach some live worker."""
        return self.census.spreading()

    def pop_disseminated(self) -> list[Reached]:
        """Versions that reached every live worker since the last call."""
        done, self._reached = self._reached, []
        return done
