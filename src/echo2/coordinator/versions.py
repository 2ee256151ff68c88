"""The coordinator's book of published versions: hash and size, relay plan, when each was published.

Not locked on its own: :class:`echo2.coordinator.state.CoordinatorState` calls it under its lock.
Only the versions a worker may still use are kept (:func:`echo2.core.staleness.versions_in_use`).
When a version has reached the fleet is the run's books' census (:meth:`echo2.core.books.Books.hold`),
the simulator's too: a live worker counts from its first load on, until it dies, leaves or is parked.
"""

from __future__ import annotations

import time

from echo2.broadcast.topology import Node, Plan, Planner
from echo2.core.staleness import versions_in_use
from echo2.protocol import LEARNER_SOURCE, DeltaStep, VersionInfo


class VersionBook:
    def __init__(self, planner: Planner, staleness: int) -> None:
        self.planner, self.staleness = planner, staleness
        self.published: dict[int, VersionInfo] = {}
        self.published_at: dict[int, float] = {}
        self.plans: dict[int, Plan] = {}

    def publish(self, info: VersionInfo, live: list[Node]) -> None:
        """Record ``info.version`` and plan who relays it to whom among the ``live`` workers (one
        that joins later fetches from the learner). A version's delta travels the same plan."""
        version = info.version
        previous = self.plans[max(self.plans)] if self.plans else {}
        self.plans[version] = self.planner(live, list(previous))
        self.published[version] = info
        self.published_at[version] = time.time()
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

