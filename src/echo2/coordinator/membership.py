"""The workers' comings and goings in the coordinator's books: registering, heartbeats, silence
(declared dead: leases expired), leaving on purpose, quarantine after a failed audit; each of
them re-plans activation and re-queues what a worker leaves unfinished."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from echo2.coordinator.books import CoordinatorBooks
from echo2.coordinator.records import Rejected, WorkerRecord, check_telemetry
from echo2.exchange import Group
from echo2.net.ratelimit import RateLimiter
from echo2.protocol import HeartbeatResponse, SlowSource, TimelineEvent

log = logging.getLogger("echo2")

#: Seconds between two reaps of silent workers and overdue leases by the coordinator's waits.
REAP_EVERY_S = 0.25

#: How far before its registration a worker's interval may be drawn from (its clock's allowance).
INTERVAL_LEAD_S = 60.0

#: Timeline events one worker may write into ``timeline.jsonl`` (burst, per minute): 20 a second,
#: far above an honest worker's one interval per lease or fetch. A line is about 120 bytes, so a
#: worker adds at most ~2.4 kB/s (after a burst of 200 lines) whatever it sends; one had added
#: 7.6 MB/s. Events past it are counted (``timeline_events_dropped``) and still counted in the
#: dissemination census: only their drawing is left out.
TIMELINE_EVENTS = (200, 1200.0)

#: Identities on trial a run admits at once at least (:meth:`Membership.register`).
TRIAL_SEATS = 16

#: Identities on trial (registered, nothing delivered, nothing missed yet) admitted at once: at
#: least :data:`TRIAL_SEATS`, more only as others deliver,
#: :data:`TRIAL_PER_DELIVERING` for each worker that has. The per-address registration allowance does not bound an attacker with many addresses, and
#: 64 identities holding one lent slot each had cut the learner to a tenth of its steps; an honest
#: fleet joining at once waits its turn (429, ``Retry-After``), the seats doubling as it delivers.
TRIAL_PER_DELIVERING = 2
#: Seconds a registration refused for want of a trial seat is told to wait.
TRIAL_RETRY_S = 5.0


class Membership:
    """The workers' comings and goings in ``parts``; every bounded wait reaps the silent ones
    (:meth:`wait`). ``heartbeat_timeout_s``: silence that declares a worker dead; ``trial_seats``:
    identities on trial admitted at once, at least (:data:`TRIAL_SEATS`, or the local workers)."""

    def __init__(self, parts: CoordinatorBooks, *, heartbeat_timeout_s: float, trial_seats: int = TRIAL_SEATS) -> None:
        self.parts = parts
        self.heartbeat_timeout_s, self.trial_seats = heartbeat_timeout_s, trial_seats
        self.timeline_budget = RateLimiter(*TIMELINE_EVENTS)
        """Timeline events each worker may have drawn (:data:`TIMELINE_EVENTS`)."""
        self._reaped_at = 0.0

    def wait(self, deadline: float, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` or ``deadline``, reaping dead workers meanwhile (at most every
        :data:`REAP_EVERY_S` whoever waits: each waiter reaping on each wake-up had cost the lock
        O(waiters x workers) a second, and a swarm of 256 identities delayed heartbeats by 9-12 s)."""
        while not ready() and (remaining := deadline - time.monotonic()) > 0:
            self.parts.cond.wait(min(remaining, 0.5))
            if time.monotonic() - self._reaped_at >= REAP_EVERY_S:
                self.reap()

    def register(self, name: str, relay_url: str | None = None, upload_bytes_per_s: float | None = None,
                 price_per_hour: float = 0.0, worker_class: str = "", site: str = "") -> WorkerRecord:
        with self.parts.cond:
            self._admit_on_trial()
            checker = self.parts.relay_checker
            record = self.parts.registry.add(name, relay_url, upload_bytes_per_s, price_per_hour, worker_class, site,
                                       relay_checked=checker is not None)
            if checker is not None and relay_url is not None:
                checker.check(record.worker_id, relay_url)
            self.parts.books.counters.workers_registered += 1
            self.parts.replan(f"{record.name} joined")
            self.parts.cond.notify_all()
            return record

    def _admit_on_trial(self) -> None:
        """Refuse a registration (429, counted) while the identities on trial fill their seats."""
        fleet = self.parts.registry.fleet()
        on_trial = sum(not r.proven and not r.unfulfilled for r in fleet)
        seats = max(self.trial_seats, TRIAL_PER_DELIVERING * sum(r.proven for r in fleet))
        if on_trial >= seats:
            self.parts.books.counters.registrations_refused_trial += 1
            raise Rejected(429, f"{on_trial} workers are on trial (registered, nothing delivered yet), the most "
                                f"admitted while {seats // TRIAL_PER_DELIVERING} deliver; retry in "
                                f"{TRIAL_RETRY_S:.0f}s", "trial_full", retry_after_s=TRIAL_RETRY_S)

    def authenticate(self, session_token: str | None) -> WorkerRecord:
        with self.parts.cond:
            return self.parts.registry.authenticate(session_token)

    def heartbeat(self, record: WorkerRecord, version: int, events: list[TimelineEvent],
                  upload_bytes_per_s: float | None = None, slow_sources: list[SlowSource] = ()) -> HeartbeatResponse:
        with self.parts.cond:
            record.last_seen = time.monotonic()
            check_telemetry(version, events, self.parts.version, time.time())
            record.version = version
            if upload_bytes_per_s is not None:  # measured beats declared
                record.upload_bytes_per_s = upload_bytes_per_s
            if slow_sources:
                chains = self.parts.versions.chains_of(record.worker_id)
                for slow in slow_sources:
                    if (relay := self.parts.registry.reported_relay(record, slow.url.rstrip("/"), chains)) is None:
                        continue
                    if slow.bytes_per_s > 0:  # it sent, below its floor: taken out on the reporter's word
                        self.parts.registry.demote_relay(relay, slow.bytes_per_s, f"left by {record.name}")
                    else:  # silent to the reporter: a cut link looks the same, so the coordinator asks it too
                        self.parts.recheck_relay(relay, record.name)
            self.record_events(record, events)
            return HeartbeatResponse(latest_version=self.parts.version, stop=self.parts.finished)

    def record_events(self, record: WorkerRecord, events: list[TimelineEvent]) -> None:
        """Count a worker's reported events. A fetch's end is the worker's word, on its own clock:
        the census takes it no later than now, when the report arrived. A fetch cannot end after
        the report of it, and a time inside the clock-skew allowance (``check_telemetry``'s day)
        had let one worker claim a version took it a day to get, which made the fleet's
        dissemination time a day and activation run every worker."""
        now = time.time()
        drawn = self.timeline_budget.grant(record.worker_id, len(events))
        record.events_dropped += len(events) - drawn
        for index, event in enumerate(events):
            if event.kind == "fetch":
                record.fetched(event)
                self.parts.census(record, event.version, min(event.end, now))
            if index < drawn:  # drawn within its registration and now: one interval of +-86,000 s had hidden the run
                end = min(event.end, now)
                self.parts.on_interval(record.name, event.kind, min(max(event.start, record.registered_at - INTERVAL_LEAD_S),
                                                              end), end, event.version)
        if any(event.kind == "fetch" for event in events):
            self.parts.time_dissemination()

    def reap(self) -> None:
        """Declare silent workers dead and expire overdue leases (their prompts are re-queued)."""
        with self.parts.cond:
            self._reaped_at = time.monotonic()
            for record in self.parts.registry.silent(self.heartbeat_timeout_s):
                record.alive = False
                log.warning("worker %s silent for %.0fs: declared dead", record.name, self.heartbeat_timeout_s)
                self.parts.books.counters.workers_dead += 1
                self.parts.replan(f"{record.name} died")
            now = time.monotonic()
            for lease in self.parts.books.active_leases():
                overdue = now > lease.deadline
                if overdue or not self.parts.registry.workers[lease.worker_id].alive:
                    self.parts.expire(lease, missed_deadline=overdue)  # a miss slows its worker, then parks it
            for source in self.parts.sources.values():
                source.reap()

    def deregister(self, record: WorkerRecord) -> None:
        """A worker leaving on purpose (preemption): its unfinished leases go back to the queue now."""
        with self.parts.cond:
            record.alive, record.left = False, True
            self.parts.books.counters.workers_left += 1
            returned = self.parts.books.active_leases(record.worker_id)
            for lease in returned:
                self.parts.expire(lease)
            log.info("worker %s left (deregistered); %d unfinished leases re-issued", record.name, len(returned))
            self.parts.replan(f"{record.name} left")

    def quarantine(self, worker_id: str, reason: str, taken: list[Group] = ()) -> int:
        """Stop trusting a worker whose results failed verification: no more leases or submissions,
        its active leases re-issued, its buffered groups — and ``taken``, its groups already in the
        learner's batch — discarded (prompts re-queued). Returns how many groups were discarded."""
        with self.parts.cond:
            self.parts.drop_taken(taken, requeue=True)
            self.parts.books.counters.groups_discarded_quarantined += len(taken)
            record = self.parts.registry.workers[worker_id]
            if record.quarantined:
                return 0
            record.quarantined = True
            self.parts.books.counters.workers_quarantined += 1
            for lease in self.parts.books.active_leases(worker_id):
                self.parts.expire(lease)
            mine = self.parts.books.ledger.evict(lambda group: worker_id in group.workers())
            self.parts.books.counters.groups_discarded_quarantined += len(mine)
            log.warning("quarantined worker %s: %s (%d groups discarded)", record.name, reason, len(mine) + len(taken))
            self.parts.replan(f"{record.name} quarantined")  # out of activation, billing and the census
            self.parts.cond.notify_all()
            return len(mine) + len(taken)
