"""Which versions the working fleet holds, and when each one reached all of it: the simulated
run's dissemination figure, measured as the coordinator measures it (publish → the last active
worker holds the version, or a newer one)."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from echo2.simulation.fleet import SimWorker


class VersionCensus:
    def __init__(self) -> None:
        self.published_at: list[float] = [0.0]
        """When each version was published (index = version)."""
        self.held: Counter[int] = Counter()
        """Active, unparked workers per version loaded."""
        self.oldest_reached = 0
        self.loaded: set[int] = {0}
        """Versions some worker loaded itself (a version everyone skipped is not measured)."""

    def published(self, now: float) -> None:
        self.published_at.append(now)

    def version_at(self, server_time: float) -> int:
        """The newest version published at or before ``server_time``."""
        return max(0, bisect.bisect_right(self.published_at, server_time) - 1)

    def count(self, worker: SimWorker, version: int | None, newest: int) -> Iterator[tuple[int, float]]:
        """``worker`` now stands for ``version`` (None: it does not count: parked, inactive, down);
        yields (version, published at) of every version that has now reached the whole fleet
        (``newest`` when nobody counts)."""
        if version == worker.counted_version:
            return
        if worker.counted_version is not None:
            self.held[worker.counted_version] -= 1
            if not self.held[worker.counted_version]:
                del self.held[worker.counted_version]
        if version is not None:
            self.held[version] += 1
        worker.counted_version = version
        oldest = min(self.held) if self.held else newest
        for reached in range(self.oldest_reached + 1, oldest + 1):
            if reached in self.loaded:
                yield reached, self.published_at[reached]
        self.oldest_reached = max(self.oldest_reached, oldest)
