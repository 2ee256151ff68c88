"""A rollout worker's protocol decisions without a clock: when and how it fetches weights, when it
swaps them in, what it does with a lease answer, whether it asks for its next lease ahead.

The live worker (:mod:`echo2.rollout.worker`: threads and HTTP) and the simulated one
(:mod:`echo2.simulation.workers`: events in simulated time) feed one :class:`WorkerProtocol` the
same events — a version heard of, a fetch ended, a lease answered, a lease begun — and carry out
the actions it returns, so a simulated worker fetches, swaps, waits and leases exactly when a
live one would.

Protocols (Echo, arXiv 2508.05387):

* ``sync`` / ``pull`` — *sequential pull*: before every lease request the worker makes sure it
  holds the newest published version (a blocking fetch when there is one);
* ``async`` — *push-pull*: a background fetch of the newest version heard of (every heartbeat
  and lease reply announces it) while the worker generates; the fetched version is *staged* and
  swapped in between two leases, never during one; a ``refresh`` answer (weights too old for the
  next slot) makes the worker wait for the staged version.

An async worker whose lease requests take long against its leases asks for the next lease when it
begins one (:func:`echo2.core.leasing.worth_asking_ahead`); that lease is generated with the
weights held when it was asked for, so nothing is asked ahead while a fetched version waits to be
swapped in (else it would never be), nor when episodes may swap weights between turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from echo2.core.leasing import worth_asking_ahead
from echo2.core.smoothing import EMA_WEIGHT, ema

BeforeLease = Literal["fetch_newest", "swap_in", "lease"]
"""What to do before asking for a lease: fetch (blocking) the newest version if newer, swap the
staged version in, or just ask."""
AfterAnswer = Literal["generate", "ask_again", "wait_for_staged", "stop"]
"""What to do with a lease answer: generate the lease; ask again (``wait``, ``parked``, or
``refresh`` under sequential pull, whose next request fetches first); swap in the staged version,
waiting for it if none is staged yet (``refresh``, async); leave (the run is over)."""


@dataclass
class WorkerProtocol:
    protocol: str
    """``sync``, ``pull`` or ``async``."""
    swaps_mid_lease: bool = False
    """Weights may change within a lease (async: between an episode's turns, or between decoding
    steps): nothing asked ahead (a lease asked at one version would begin at a newer one)."""
    version: int = -1
    """The version loaded (-1: none yet)."""
    staged: int | None = None
    """Async: a fetched version waiting to be swapped in."""
    fetched: int = -1
    """Async: the newest version the background fetch brought (staged or swapped in since)."""
    known: int = 0
    """The newest version heard of."""
    fetching: bool = False
    """A fetch is under way (the background one, or the simulator's blocking one)."""
    asking_ahead: bool = False
    """A lease request asked ahead is unanswered."""
    round_trip_s: float | None = None
    """Moving average of a granted lease request's round trip."""
    generate_s: float | None = None
    """Moving average of a lease's generation time."""

    @property
    def in_background(self) -> bool:
        """Weights arrive in the background (async), not before each request (sequential pull)."""
        return self.protocol == "async"

    # ------------------------------------------------------------------ weights
    def heard(self, version: int) -> bool:
        """``version`` was announced; True: start a background fetch now."""
        self.known = max(self.known, version)
        return self.wants_fetch()

    def wants_fetch(self) -> bool:
        """Async, weights held, no fetch under way, and a version newer than any held was heard of.
        Never before the first weights are loaded: that fetch is the blocking one, and a background
        fetch beside it downloaded the same version twice, doubling the learner's upload when a
        healed partition brings every worker back at once."""
        return (self.in_background and self.version >= 0 and not self.fetching
                and self.known > max(self.fetched, self.version))

    def fetch_started(self) -> None:
        self.fetching = True

    def fetch_ended(self, version: int | None) -> bool:
        """The background fetch ended, bringing ``version`` (None: nothing newer, or it failed);
        True: fetch again now (a newer version was heard of meanwhile)."""
        self.fetching = False
        if version is not None:
            self.fetched, self.staged = max(self.fetched, version), version
        return self.wants_fetch()

    def loaded(self, version: int) -> None:
        """A blocking fetch (sequential pull, or a worker's first weights) loaded ``version``."""
        self.version, self.fetching = version, False
        self.fetched, self.known = max(self.fetched, version), max(self.known, version)

    def swap_in(self) -> int | None:
        """Take the staged version: the one to load now, or None (none staged, or not newer)."""
        staged, self.staged = self.staged, None
        if staged is None or staged <= self.version:
            return None
        self.version = staged
        return staged

    def forget(self) -> None:
        """The coordinator forgot this worker (a resumed learner: version numbers start over with
        other weights): nothing held counts any more."""
        self.version, self.staged, self.fetched, self.known = -1, None, -1, 0
        self.fetching = self.asking_ahead = False

    # ------------------------------------------------------------------ leases
    def before_lease(self) -> BeforeLease:
        if not self.in_background:
            return "fetch_newest"
        return "swap_in" if self.staged is not None else "lease"

    def answered(self, status: str, latest_version: int, round_trip_s: float) -> AfterAnswer:
        """A lease request was answered ``status`` after ``round_trip_s``, announcing ``latest_version``."""
        self.asking_ahead = False
        self.known = max(self.known, latest_version)
        if status == "stop":
            return "stop"
        if status == "granted":
            self.round_trip_s = ema(self.round_trip_s, round_trip_s, EMA_WEIGHT)
            return "generate"
        return "wait_for_staged" if status == "refresh" and self.in_background else "ask_again"

    def generated(self, seconds: float) -> None:
        """A lease took ``seconds`` to generate."""
        self.generate_s = ema(self.generate_s, seconds, EMA_WEIGHT)

    def ask_ahead(self, leaving: bool = False) -> bool:
        """A granted lease begins: True when the next lease should be asked for now (and it is
        then counted as asked). Never while ``leaving`` (the worker ends with the lease in hand)."""
        if (leaving or self.asking_ahead or not self.in_background or self.swaps_mid_lease
                or self.staged is not None or not worth_asking_ahead(self.round_trip_s, self.generate_s)):
            return False
        self.asking_ahead = True
        return True
