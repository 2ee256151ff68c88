"""The discrete-event core: a clock and a time-ordered queue of callbacks (``heapq``).

Events at the same instant run in the order they were scheduled (a sequence number breaks ties),
so a run is deterministic for a given seed. Events are per lease, per version and per fetch,
never per token, which keeps a 1000-worker, 1000-step run to a few million events.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._sequence = itertools.count()
        self.processed = 0

    def at(self, time: float, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` at simulated ``time`` (never before now)."""
        heapq.heappush(self._heap, (max(time, self.now), next(self._sequence), callback, args))

    def after(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + delay, callback, *args)

    def run(self, until: Callable[[], bool]) -> None:
        """Process events in time order until ``until()`` holds or nothing is left."""
        heap = self._heap
        while heap and not until():
            self.now, _, callback, args = heapq.heappop(heap)
            self.processed += 1
            callback(*args)
