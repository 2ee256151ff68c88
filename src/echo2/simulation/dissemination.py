"""The links of the simulation: what the relay planner knows of a worker, and the uplinks fetches share.

Two kinds of source serve a fetch (who fetches from whom: :mod:`echo2.simulation.fetching`):

* the learner's uplink, chunk by chunk (:class:`LearnerUplink`), as echo2's throttle serves it
  (:mod:`echo2.broadcast.throttle`): chunk requests first come first served, each fetch keeping
  ``IN_FLIGHT`` chunks asked at a time. Of ``n`` fetches asked at once the ``k``-th ends at
  ``(n (M - w) + k w) / B`` with ``w = min(M, IN_FLIGHT * chunk)``
  (:func:`echo2.planning.broadcast_time.arrival_seconds`): one after the other for a payload of a
  window or less, side by side for a larger one; fetches asked at different times (workers
  fetching back to back on a saturated link) share it from then on. This is the star's whole
  dissemination and the root of every relay tree, so it is timed exactly;
* a relay's uplink as a fluid (:class:`RelayUplink`): the fetches it serves share it equally,
  each capped by its receiver's downlink (the spare share going to the others). The same
  first-come-first-served queue gives concurrent fetches round-robin chunks, so this is the
  throttle to within a chunk, at an event per change in the set of fetches rather than per
  chunk: a relay serves a handful of children and the odd fallback, and a 1000-worker fleet has
  a thousand relays.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from echo2.broadcast.topology import Node
from echo2.planning.broadcast_time import IN_FLIGHT
from echo2.simulation.events import EventQueue


@dataclass(frozen=True)
class Peer:
    """A running worker, as the broadcast sees it (bytes/s; ``math.inf`` = unlimited)."""

    id: str
    upload: float
    download: float
    one_way_s: float
    """Half the worker's round trip to the learner."""
    reachable: bool = True

    @property
    def node(self) -> Node:
        """The relay planner's view of this worker (made once per peer)."""
        node = self.__dict__.get("_node")
        if node is None:
            node = Node(self.id, self.upload, self.reachable)
            object.__setattr__(self, "_node", node)
        return node


#: Chunks a :class:`LearnerUplink` times per fetch at most (larger ones for a payload of more): an
#: event per chunk, and a fetch's time shifts by at most a window of them (2 / 64 of the payload).
MAX_CHUNKS = 64


@dataclass
class ChunkFetch:
    """One worker's fetch from the learner."""

    left: deque[float]
    """Sizes of the chunks not yet asked for."""
    download: float
    done: Callable[[], None]
    alive: Callable[[], bool]
    """False once the fetch was abandoned (its worker went down): its requests are dropped."""
    outstanding: int = 0


class LearnerUplink:
    """The learner's uplink, chunk request by chunk request (see the module docstring), at
    ``upload`` bytes/s or the receiver's ``download`` when slower."""

    def __init__(self, queue: EventQueue, upload: float, payload: float, chunk: float) -> None:
        self.queue, self.upload, self.payload = queue, upload, payload
        self.chunk = max(chunk, payload / MAX_CHUNKS)
        self.requests: deque[tuple[ChunkFetch, float]] = deque()
        self.busy = False

    def fetch(self, download: float, done: Callable[[], None], alive: Callable[[], bool],
              size: float | None = None) -> None:
        """Fetch ``size`` bytes (the whole payload by default; less when resuming a fetch another
        source broke off); ``done()`` runs when the last chunk has arrived."""
        full, rest = divmod(self.payload if size is None else size, self.chunk)
        fetch = ChunkFetch(deque([self.chunk] * int(full) + ([rest] if rest > 0 else [])), download, done, alive)
        if not fetch.left:
            self.queue.after(0.0, done)
            return
        for _ in range(min(IN_FLIGHT, len(fetch.left))):
            self._ask(fetch)
        self._serve()

    def _ask(self, fetch: ChunkFetch) -> None:
        fetch.outstanding += 1
        self.requests.append((fetch, fetch.left.popleft()))

    def _serve(self) -> None:
        while not self.busy and self.requests:
            fetch, size = self.requests.popleft()
            if not fetch.alive():
                continue
            self.busy = True
            rate = min(self.upload, fetch.download)
            self.queue.after(size / rate if rate < math.inf else 0.0, self._served, fetch)

    def _served(self, fetch: ChunkFetch) -> None:
        self.busy = False
        fetch.outstanding -= 1
        if fetch.alive():
            if fetch.left:
                self._ask(fetch)
            elif not fetch.outstanding:
                fetch.done()
        self._serve()


class Flow:
    """One fetch a relay serves: bytes left, its receiver's downlink, its current rate."""

    __slots__ = ("cap", "done", "left", "rate", "token")

    def __init__(self, size: float, cap: float, done: Callable[[], None]) -> None:
        self.left, self.cap, self.done = size, cap, done
        self.rate = 0.0
        self.token = 0
        """Bumped at every re-allocation: the end event of an older allocation is void."""


class RelayUplink:
    """A relay's uplink shared by the fetches it serves (see the module docstring)."""

    def __init__(self, queue: EventQueue, upload: float) -> None:
        self.queue, self.upload = queue, upload
        self.flows: list[Flow] = []
        self.updated = 0.0

    def send(self, size: float, download: float, done: Callable[[], None]) -> Flow:
        """Start sending ``size`` bytes; ``done()`` runs when they are through."""
        self._advance()
        flow = Flow(size, download, done)
        self.flows.append(flow)
        self._allocate()
        return flow

    def cancel(self, flow: Flow) -> float:
        """Stop ``flow`` (its receiver or this relay went away); returns the bytes it had left."""
        if flow in self.flows:
            self._advance()
            self.flows.remove(flow)
            self._allocate()
        flow.token += 1
        return flow.left

    def _advance(self) -> None:
        elapsed, self.updated = self.queue.now - self.updated, self.queue.now
        for flow in self.flows:
            flow.left = max(0.0, flow.left - flow.rate * elapsed)

    def _allocate(self) -> None:
        """Equal shares, a flow capped by its downlink leaving the rest to the others (max-min fair)."""
        spare, count = self.upload, len(self.flows)
        for flow in sorted(self.flows, key=lambda f: f.cap):
            flow.rate = min(flow.cap, spare / count)
            spare = spare if spare == math.inf else max(0.0, spare - flow.rate)
            count -= 1
            flow.token += 1
            seconds = flow.left / flow.rate if flow.rate < math.inf else 0.0
            self.queue.after(seconds, self._finished, flow, flow.token)

    def _finished(self, flow: Flow, token: int) -> None:
        if token != flow.token:
            return
        self._advance()
        self.flows.remove(flow)
        flow.left = 0.0
        self._allocate()
        flow.done()
