"""What the coordinator keeps about workers and leases, the submission limits, and its refusals.

Plain records; :mod:`echo2.coordinator.state` owns them and changes them under its lock.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from echo2.core.books import Lease as BookLease
from echo2.core.profiling import LeaseCycle
from echo2.tasks import Example

if TYPE_CHECKING:
    from echo2.protocol import SubmitRequest, TimelineEvent


class Rejected(Exception):
    """A request refused with an HTTP status and a reason (the state is left unchanged)."""

    def __init__(self, status: int, reason: str, code: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.status, self.reason, self.code, self.retry_after_s = status, reason, code, retry_after_s


def session_refusal(record: WorkerRecord | None) -> Rejected | None:
    """Why the holder of a session credential (``record``; None: unknown) may not act now, or None."""
    if record is None:
        return Rejected(401, "unknown or missing session credential; register first", "unauthorized")
    if record.left:
        return Rejected(410, "this worker deregistered (left the run); register again to rejoin", "left")
    if not record.alive:
        return Rejected(410, "this worker was declared dead (no heartbeat); register again", "dead")
    return None


#: How far a worker's timeline times may be from the coordinator's clock (seconds): a day of clock
#: skew is generous for a synced host, and a time of 1e308 (finite, so past the schema) is refused.
MAX_CLOCK_SKEW_S = 86_400.0


def check_telemetry(version: int, events: list[TimelineEvent], latest: int, now: float) -> None:
    """Refuse a worker's report of what it holds (``version``) and did (``events``) unless every
    number is one an honest worker can send: no version past the newest published (``latest``),
    no time more than :data:`MAX_CLOCK_SKEW_S` from the coordinator's wall clock ``now``."""
    if version > latest:
        raise Rejected(409, f"version {version} is newer than the published {latest}", "bad_version")
    for event in events:
        if event.version > latest:
            raise Rejected(409, f"a {event.kind} event of version {event.version}, newer than the published "
                           f"{latest}", "bad_version")
        if abs(event.start - now) > MAX_CLOCK_SKEW_S or abs(event.end - now) > MAX_CLOCK_SKEW_S:
            raise Rejected(422, f"a {event.kind} event from {event.start:.0f} to {event.end:.0f} is more than "
                           f"{MAX_CLOCK_SKEW_S:.0f}s from the coordinator's clock ({now:.0f}): check the "
                           "worker's clock", "bad_time")


@dataclass
class WorkerRecord:
    worker_id: str
    name: str
    session_token: str
    version: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    alive: bool = True
    groups: int = 0
    samples: int = 0
    tokens: int = 0
    generate_seconds: float = 0.0
    rejected: int = 0
    fetches: int = 0
    delta_fetches: int = 0
    """Fetches that rebuilt the version from its delta (``broadcast.encoding: delta``)."""
    last_fetch_seconds: float = 0.0
    relay_url: str | None = None
    relay_reachable: bool | None = None
    """Whether its relay answered the coordinator as this worker (None: not asked yet, or no
    check in this setup): only then do peers get sent there (:mod:`echo2.coordinator.relay_check`)."""
    site: str = ""
    """The address it connected to the coordinator from (a host-scoped relay serves only its site)."""
    upload_bytes_per_s: float | None = None
    """Its relay's uplink as it declared or measured it (its word on itself)."""
    relay_demoted_until: float = 0.0
    """``time.monotonic()`` before which its relay is no peer's source: a peer left it for its rate
    (:meth:`echo2.coordinator.registry.WorkerRegistry.demote_relay`)."""
    relay_demotions: int = 0
    relay_peer_rate: float | None = None
    """The lowest rate (bytes/s) a peer that left its relay measured from it."""
    loaded_version: int = -1
    price_per_hour: float = 0.0
    worker_class: str = ""
    active: bool = True
    """False: parked by cost-aware activation (no leases)."""
    parked_at: float | None = None
    """``time.monotonic()`` when activation parked it (None: active)."""
    quarantined: bool = False
    """Its results failed verification: no more leases or submissions."""
    left: bool = False
    """Deregistered itself (preemption, SIGTERM)."""
    unfulfilled: int = 0
    """Its leases that expired unsubmitted since its last submission (:mod:`echo2.core.shares`)."""
    proven: bool = False
    """It has submitted a lease: out of its trial of one group per lease (:mod:`echo2.core.shares`)."""
    groups_delivered: int = 0
    """Its groups trained (:func:`echo2.core.shares.delivered`)."""
    parked_until: float = 0.0
    """``time.monotonic()`` before which it gets no lease: its leases kept expiring unfulfilled."""
    throughput: float | None = None
    """Moving average of measured rollouts/s (None until its first lease is submitted)."""
    polling: bool = False
    """A lease request of its is held open now (one at a time: :mod:`echo2.coordinator.work`)."""
    ask_again_at: float = 0.0
    """``time.monotonic()`` before which its lease requests are refused: it was told to wait
    (:data:`echo2.coordinator.work.EARLY_ASK_SHARE`)."""
    rate_limited: int = 0
    """Its requests refused for being over its budget on the wire (429, :mod:`echo2.coordinator.app`)."""
    events_dropped: int = 0
    """Its timeline events left out of ``timeline.jsonl``, over its budget (:mod:`echo2.coordinator.membership`)."""
    registered_at: float = field(default_factory=time.time)
    """Wall time it registered: no interval of its is drawn from before (less the clock allowance)."""

    cycle: LeaseCycle = field(default_factory=LeaseCycle)
    """Where its current lease cycle began, ``time.monotonic()`` (:func:`~echo2.core.profiling.busy_seconds`)."""
    last_error: str = ""
    """Why its latest refused request was refused (code: reason), for the dashboard."""

    @property
    def in_fleet(self) -> bool:
        """Alive and not quarantined: what activation chooses from, the relay plan sends peers to
        and billing may count. A quarantined worker may keep its heartbeats, but it gets no lease:
        counted as capacity it would leave the fleet short, billed it would cost what it cannot
        earn, in the census every version's spread would wait for it."""
        return self.alive and not self.quarantined

    def relay_demoted(self, now: float) -> bool:
        return now < self.relay_demoted_until

    @property
    def planned_upload_bytes_per_s(self) -> float:
        """The rate the relay plan counts it at: its word, or less where a peer measured less."""
        return min(self.upload_bytes_per_s or 0.0, self.relay_peer_rate if self.relay_peer_rate is not None else math.inf)

    @property
    def at_work(self) -> bool:
        """In the fleet and not parked: the workers the dissemination census counts (the
        simulator's rule too: :meth:`echo2.simulation.engine.Simulation.census`)."""
        return self.in_fleet and self.active

    def fetched(self, event: TimelineEvent) -> None:
        """A weight fetch it finished: counts, latency, and the version it now holds."""
        self.fetches += 1
        self.delta_fetches += event.delta
        self.last_fetch_seconds = event.end - event.start
        self.loaded_version = max(self.loaded_version, event.version)

    def count(self, request: SubmitRequest, wall_s: float) -> None:
        """Add an accepted submission to this worker's totals. Its claimed generation time counts
        up to ``wall_s``, the time from its lease's grant to now: an honest one fits inside."""
        self.samples += sum(len(g.completions) for g in request.groups) + sum(len(r.sequences) for r in request.samples)
        self.tokens += (sum(len(c.token_ids) for g in request.groups for c in g.completions)
                        + sum(len(q.token_ids) for r in request.samples for q in r.sequences))
        self.groups += len(request.groups) + len(request.samples)
        self.generate_seconds += min(request.generate_seconds, wall_s)


@dataclass(eq=False)
class Lease(BookLease[Example]):
    """A lease of the books (:class:`echo2.core.books.Lease`: slot -> the prompt handed out for
    it), with what only the coordinator keeps of it."""

    scoring: set[int] = field(default_factory=set)
    """Slots whose submitted groups are being scored (outside the coordinator's lock): another copy
    of that submission is a duplicate."""
    answers: dict[tuple[int, tuple[str, ...]], str | None] = field(default_factory=dict)
    """Episodes: what the environment answered, by (slot, the model's replies so far); a
    submission's inserted tokens must be these answers (:mod:`echo2.coordinator.scoring`)."""
    draw_seed: int = field(default_factory=lambda: secrets.randbits(63))
    """The lease's randomness (:mod:`echo2.model.draws`), drawn here: the worker cannot choose it."""


@dataclass
class Limits:
    """What a valid submission may contain."""

    group_size: int
    max_new_tokens: int
    """Per model turn."""
    vocab_size: int
    max_turns: int = 1
