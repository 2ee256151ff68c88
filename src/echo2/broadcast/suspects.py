"""Relays a node could not reach lately, skipped for a while.

A relay a node could not reach (a silent partition, a NAT mapping gone, a host down) is usually
still out of reach for the next version, which the coordinator's plan, unaware of one cut link,
routes through it again. Each new fetch would then spend the stall budget on it first, and where a
version takes longer to arrive than the learner takes to publish the next, the node's fetches are
outdated before they complete and it loads nothing until the link heals (seen in
``bench/partitions.py``'s ``relay_download`` case on a slower machine: a relay's child cut from its
relay loaded its first version 9.5 s after the heal instead of from the learner during the
outage). So a relay that failed at the transport level (no answer, no bytes, connection refused or
reset, a corrupt chunk) is left out of this node's chains for :data:`SUSPECT_S`, and each time it
fails again within :data:`SLOW_S` of its last failure for twice as long (up to :data:`SLOW_S`): a
relay that accepts connections and sends nothing (``bench/attacks.py``'s silent relay) had cost
every worker a whole stall budget each time its 30 s lapsed, a stall a minute for the whole run,
where a healed link is tried again after the first lapse. The learner, the chain's last source, is
never left out: it is the source of last resort.

A relay left for sending too slowly (:func:`echo2.core.fetch_chain.too_slow`) is skipped longer,
:data:`SLOW_S`, and reported to the coordinator with the rate measured (the next heartbeat drains
:meth:`SuspectSources.reports`), which takes it out of the plan: one that trickles bytes answers,
so nothing but its rate tells it from a healthy one, and going back to it costs a stall each time.
A relay that took the connection and sent nothing is reported too, at 0 B/s: the coordinator asks
it for a chunk itself before taking it out of the plan (:meth:`echo2.coordinator.relay_check.RelayChecker.recheck`),
since a cut link between two honest nodes looks the same to the child.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Seconds a relay that failed at the transport level is left out of a node's chains: a few
#: versions' time, short enough that a healed relay is soon used again.
SUSPECT_S = 30.0

#: Seconds a relay left for its rate is skipped: the coordinator's first demotion of it
#: (:data:`echo2.coordinator.registry.DEMOTED_S`), which this node's report asks for.
SLOW_S = 300.0

#: Reports of slow relays a node keeps for its next heartbeat (the protocol's limit per heartbeat).
MAX_REPORTS = 16


class SuspectSources:
    """The relays one node could not reach lately (shared by its fetches, thread-safe)."""

    def __init__(self, suspect_s: float = SUSPECT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.suspect_s, self.clock = suspect_s, clock
        self._until: dict[str, float] = {}
        self._slow: dict[str, float] = {}  # url -> measured bytes/s, not reported yet
        self._failures: dict[str, tuple[int, float]] = {}  # url -> (failures in a row, when the last time out ends)
        self._lock = threading.Lock()

    def failed(self, url: str, silent: bool = False) -> None:
        """``url`` could not be reached: leave it out for ``suspect_s``, doubled for each time it
        failed before within :data:`SLOW_S` of its last time out's end (at most :data:`SLOW_S`);
        failures while it is left out (a fetch's requests in flight) are one. ``silent``: it took
        the connection and sent nothing; reported at 0 B/s, which the coordinator checks from its
        own host before it takes the relay out for everyone (a link cut between two honest nodes
        is silent too)."""
        url, now = url.rstrip("/"), self.clock()
        with self._lock:
            if self._until.get(url, 0.0) > now:
                return
            if silent and (url in self._slow or len(self._slow) < MAX_REPORTS):
                self._slow[url] = 0.0
            count, ended = self._failures.get(url, (0, float("-inf")))
            count = count + 1 if now - ended <= SLOW_S else 1
            until = self._until[url] = now + min(self.suspect_s * 2 ** (count - 1), SLOW_S)
            self._failures[url] = (count, until)

    def too_slow(self, url: str, bytes_per_s: float) -> None:
        """``url`` sent a chunk below its floor, at ``bytes_per_s``: leave it out for :data:`SLOW_S`
        and report it."""
        url = url.rstrip("/")
        with self._lock:
            self._until[url] = max(self._until.get(url, 0.0), self.clock() + SLOW_S)
            if url in self._slow or len(self._slow) < MAX_REPORTS:
                self._slow[url] = min(bytes_per_s, self._slow.get(url, bytes_per_s))

    def reports(self) -> dict[str, float]:
        """The relays left for their rate or their silence since the last call (url -> bytes/s
        measured, 0: silent), for the coordinator."""
        with self._lock:
            reports, self._slow = self._slow, {}
            return reports

    def chain(self, sources: list[str]) -> list[str]:
        """``sources`` without the relays suspected now; the last source (the learner) is always kept."""
        now = self.clock()
        with self._lock:
            self._until = {url: until for url, until in self._until.items() if until > now}
            self._failures = {url: (n, end) for url, (n, end) in self._failures.items() if now - end <= SLOW_S}
            return [s for s in sources[:-1] if s.rstrip("/") not in self._until] + sources[-1:]
