"""The coordinator's state: one lock over the registry, the leases, the pacing ledger and the versions.

The HTTP handlers (threads of the server) and the learner loop (main thread) share it through a
:class:`threading.Condition`. Each job lives in its own module — workers and credentials
(:mod:`~echo2.coordinator.registry`), leases and submission checks
(:mod:`~echo2.coordinator.leases`), slots, buffer and re-queue (:mod:`echo2.core.pacing`, the same
ledger the simulator keeps), versions and relay plans (:mod:`~echo2.coordinator.versions`),
activation and billing (:mod:`~echo2.coordinator.fleet`), lease shares (:mod:`echo2.core.shares`), the
learner's batches (:mod:`~echo2.coordinator.batches`); this class only sequences them, waits
(every wait bounded) and counts. The learner sees it through :class:`echo2.exchange.RolloutSource`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from echo2.broadcast.topology import Planner, star_plan
from echo2.coordinator import snapshot
from echo2.coordinator.batches import LearnerSide
from echo2.coordinator.cursor import CountingStream, TrainedDraws
from echo2.coordinator.fleet import Fleet
from echo2.coordinator.leases import LeaseBook, accepted_groups
from echo2.coordinator.records import Lease, Limits, Rejected, WorkerRecord, check_telemetry
from echo2.coordinator.registry import WorkerRegistry
from echo2.coordinator.relay_check import RelayChecker
from echo2.coordinator.reliability import reliability_report
from echo2.coordinator.scoring import Environment, Scorer, Scoring
from echo2.coordinator.versions import VersionBook
from echo2.exchange import Group, RunStats
from echo2.core.pacing import PacingLedger
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import (
    HeartbeatResponse,
    LeaseResponse,
    LeasedPrompt,
    RespondRequest,
    RespondResponse,
    RunSpec,
    SubmitRequest,
    SubmitResponse,
    TimelineEvent,
    VersionInfo,
)
from echo2.core.leasing import LeaseAnswer, answer_lease
from echo2.core.shares import SharePolicy, delivered, missed
from echo2.tasks import Example

log = logging.getLogger("echo2")


class CoordinatorState(LearnerSide):
    """Books of one run. ``examples`` is the task's endless training stream (the data cursor);
    ``check_relays``: peers go to a relay only once it answered as its worker (:mod:`.relay_check`)."""

    def __init__(
        self,
        spec: RunSpec,
        limits: Limits,
        examples: Iterator[Example],
        *,
        groups_per_step: int,
        run_token: str,
        lease_timeout_s: float,
        heartbeat_timeout_s: float,
        score: Scorer,
        environment: Environment | None = None,
        on_event: Callable[[str, TimelineEvent], None] = lambda worker, event: None,
        planner: Planner = star_plan,
        fleet: Fleet | None = None,
        window_share: float = 0.5,
        check_relays: bool = False,
    ) -> None:
        self.spec, self.limits = spec, limits
        self.shares = SharePolicy(groups_per_lease=spec.groups_per_lease, window_share=window_share)
        self.scoring = Scoring(score, environment)  # rewards and environment answers: the coordinator's own
        self.staleness, self.groups_per_step = spec.staleness, groups_per_step
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.on_event = on_event
        self.fleet = fleet or Fleet(ActivationPolicy(enabled=False, rollouts_per_step=1, staleness=spec.staleness))
        self.step_times: tuple[float | None, float | None] = (None, None)  # measured T_train, T_bcast
        self.cond = threading.Condition(threading.RLock())
        self.examples = examples if isinstance(examples, CountingStream) else CountingStream(examples)
        self.trained = TrainedDraws()
        self.registry = WorkerRegistry(run_token)
        self.relay_checker = RelayChecker(self.registry.broadcast_token, self._relay_verdict) if check_relays else None
        self.leases = LeaseBook(lease_timeout_s)
        self.ledger: PacingLedger[Example, Group] = PacingLedger(spec.staleness, groups_per_step)
        self.versions = VersionBook(planner, spec.staleness)
        self.finished = False
        self.counters: Counter[str] = Counter()
        self.rejected = self.leases.rejected  # submissions refused, by code

    @property
    def version(self) -> int:
        return self.ledger.version

    # ---------------------------------------------------------------- workers
    def register(self, name: str, relay_url: str | None = None, upload_bytes_per_s: float | None = None,
                 price_per_hour: float = 0.0, worker_class: str = "", site: str = "") -> WorkerRecord:
        with self.cond:
            checker = self.relay_checker
            record = self.registry.add(name, relay_url, upload_bytes_per_s, price_per_hour, worker_class, site,
                                       relay_checked=checker is not None)
            if checker is not None and relay_url is not None:
                checker.check(record.worker_id, relay_url)
            self.counters["workers_registered"] += 1
            self._replan(f"{record.name} joined")
            self.cond.notify_all()
            return record

    def _relay_verdict(self, worker_id: str, reachable: bool, why: str) -> None:
        with self.cond:
            self.registry.relay_checked(worker_id, reachable, why)

    def authenticate(self, session_token: str | None) -> WorkerRecord:
        with self.cond:
            return self.registry.authenticate(session_token)

    def _replan(self, reason: str) -> None:
        self.fleet.replan(self.registry.records(), *self.step_times, reason=reason)

    def replan(self, train_s: float, broadcast_s: float | None) -> None:
        """Re-apply cost-aware activation with the learner's latest step time and dissemination latency."""
        with self.cond:
            self.step_times = (train_s, broadcast_s if broadcast_s is not None else self.step_times[1])
            self._replan("periodic")
            self.cond.notify_all()

    def heartbeat(self, record: WorkerRecord, version: int, events: list[TimelineEvent],
                  upload_bytes_per_s: float | None = None) -> HeartbeatResponse:
        with self.cond:
            record.last_seen = time.monotonic()
            check_telemetry(version, events, self.version, time.time())
            record.version = version
            if upload_bytes_per_s is not None:  # measured beats declared
                record.upload_bytes_per_s = upload_bytes_per_s
            self._record_events(record, events)
            return HeartbeatResponse(latest_version=self.version, stop=self.finished)

    def _record_events(self, record: WorkerRecord, events: list[TimelineEvent]) -> None:
        for event in events:
            if event.kind == "fetch":
                record.fetched(event)
                self.versions.loaded(event.version, record.worker_id, event.end)
            self.on_event(record.name, event)

    def reap(self) -> None:
        """Declare silent workers dead and expire overdue leases (their prompts are re-queued)."""
        with self.cond:
            for record in self.registry.silent(self.heartbeat_timeout_s):
                record.alive = False
                log.warning("worker %s silent for %.0fs: declared dead", record.name, self.heartbeat_timeout_s)
                self.counters["workers_dead"] += 1
                self._replan(f"{record.name} died")
            overdue = self.leases.overdue()
            for lease in self.leases.active():
                record = self.registry.workers[lease.worker_id]
                if lease in overdue:
                    self._unfulfilled(record)
                if lease in overdue or not record.alive:
                    self._expire(lease)

    def _unfulfilled(self, record: WorkerRecord) -> None:
        """One more of ``record``'s leases expired unsubmitted: slow it down, then park it a while."""
        if parked_s := missed(self.shares, record, time.monotonic(), self.leases.timeout_s):
            log.warning("worker %s let %d leases in a row expire: parked for %.0f s", record.name,
                        record.unfulfilled, parked_s)

    def deregister(self, record: WorkerRecord) -> None:
        """A worker leaving on purpose (preemption): its unfinished leases go back to the queue now."""
        with self.cond:
            record.alive, record.left = False, True
            self.counters["workers_left"] += 1
            returned = self.leases.active(record.worker_id)
            for lease in returned:
                self._expire(lease)
            log.info("worker %s left (deregistered); %d unfinished leases re-issued", record.name, len(returned))
            self._replan(f"{record.name} left")

    def quarantine(self, worker_id: str, reason: str, taken: list[Group] = ()) -> int:
        """Stop trusting a worker whose results failed verification: no more leases or submissions,
        its active leases re-issued, its buffered groups — and ``taken``, its groups already in the
        learner's batch — discarded (prompts re-queued). Returns how many groups were discarded."""
        with self.cond:
            self._drop_taken(taken, requeue=True, counter="groups_discarded_quarantined")
            record = self.registry.workers[worker_id]
            if record.quarantined:
                return 0
            record.quarantined = True
            self.counters["workers_quarantined"] += 1
            for lease in self.leases.active(worker_id):
                self._expire(lease)
            mine = self.ledger.evict(lambda group: group.worker_id == worker_id)
            self.counters["groups_discarded_quarantined"] += len(mine)
            log.warning("quarantined worker %s: %s (%d groups discarded)", record.name, reason, len(mine) + len(taken))
            self.cond.notify_all()
            return len(mine) + len(taken)

    def _expire(self, lease: Lease) -> None:
        lease.state = "expired"
        self.counters["leases_expired"] += 1
        self.ledger.release(lease.examples, front=True)
        self.cond.notify_all()

    # ---------------------------------------------------------------- leases
    def _answer(self, record: WorkerRecord, worker_version: int, requested: int) -> LeaseAnswer:
        """:func:`echo2.core.leasing.answer_lease` over this coordinator's books, now."""
        held = sum(len(lease.examples) for lease in self.leases.active(record.worker_id))
        others = any(r is not record and r.active and not r.quarantined for r in self.registry.live())
        return answer_lease(self.ledger, self.shares, record, worker_version=worker_version, requested=requested,
                            held=held, active=record.active, others_live=others, now=time.monotonic(),
                            finished=self.finished)

    def _wait(self, deadline: float, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` or ``deadline``, reaping dead workers meanwhile."""
        while not ready() and (remaining := deadline - time.monotonic()) > 0:
            self.cond.wait(min(remaining, 0.5))
            self.reap()

    def lease(self, record: WorkerRecord, worker_version: int, max_groups: int, wait_s: float) -> LeaseResponse:
        deadline = time.monotonic() + wait_s
        with self.cond:
            if record.quarantined:
                raise Rejected(403, "this worker is quarantined: its results failed verification", "quarantined")
            record.last_seen = time.monotonic()
            record.version = worker_version
            if worker_version > self.version:
                raise Rejected(409, f"version {worker_version} is newer than the published {self.version}", "bad_version")
            # a request that could be granted later (window full, own lease still coming in, parked) is held open
            self._wait(deadline, lambda: self._answer(record, worker_version, max_groups).final)
            answer = self._answer(record, worker_version, max_groups)
            if answer.status != "granted":
                return LeaseResponse(status=answer.status, latest_version=self.version)
            examples = self.ledger.grant(worker_version, answer.size, lambda: next(self.examples))
            lease = self.leases.issue(record.worker_id, worker_version, examples)
            self.counters["leases_issued"] += 1
            return LeaseResponse(status="granted", latest_version=self.version, lease_id=lease.lease_id,
                                 version=worker_version, deadline_s=self.leases.timeout_s,
                                 prompts=[LeasedPrompt(slot=s, prompt=e.prompt) for s, e in examples.items()])

    # ---------------------------------------------------------------- submissions
    def submit(self, record: WorkerRecord, request: SubmitRequest) -> SubmitResponse:
        """Checked under the lock, scored outside it (:mod:`~echo2.coordinator.scoring`), admitted under it."""
        with self.cond:
            record.last_seen = time.monotonic()
            lease = self.leases.claim(request, record, self.limits, self.version)
            if lease is None:  # a copy of a lease already submitted or still being scored
                self.counters["duplicate_submissions"] += 1
                return SubmitResponse(accepted=0, duplicate=True)
        rewards = self.scoring.rewards(lease, request)  # outside the lock (a string: why it could not be scored)
        with self.cond:
            self.leases.settle(lease, record, rewards)
            self.counters["leases_completed"] += 1
            delivered(record)
            now = time.monotonic()
            self.fleet.observe(record, sum(len(g.completions) for g in request.groups), lease.granted_at, now)
            for group in accepted_groups(lease, record.worker_id, request, rewards):
                self.ledger.admit(group.slot, group.version, group)
            record.count(request, now - lease.granted_at)
            self.counters["groups_accepted"] += len(request.groups)
            self._record_events(record, request.events)
            self.cond.notify_all()
            return SubmitResponse(accepted=len(request.groups))

    def respond(self, record: WorkerRecord, request: RespondRequest) -> RespondResponse:
        """The environment's next answers, computed outside the lock and kept on the lease (checked at submission)."""
        with self.cond:
            record.last_seen = time.monotonic()
            lease = self.leases.playing(request, record, self.limits)
        answers = self.scoring.answers(lease, request)
        with self.cond:
            lease.answers.update(((i.slot, tuple(i.replies)), a) for i, a in zip(request.items, answers, strict=True))
        return RespondResponse(observations=answers)

    def publish(self, info: VersionInfo) -> None:
        """Announce ``info.version`` (its chunks, and its delta's if any, are already served) and
        plan who relays it to whom."""
        with self.cond:
            self.versions.publish(info, self.registry.plan_nodes())
            self.ledger.version = info.version
            self.cond.notify_all()

    def version_info(self, record: WorkerRecord) -> VersionInfo:
        """The current version, with the sources ``record`` should fetch it from (parent first)."""
        with self.cond:
            return self.versions.info_for(self.version, record.worker_id, self.registry.relay_urls())

    def pop_disseminated(self) -> list[tuple[int, float, float]]:
        """See :meth:`VersionBook.pop_disseminated`."""
        with self.cond:
            return self.versions.pop_disseminated([r.loaded_version for r in self.registry.live()])

    def versions_spreading(self) -> bool:
        """Whether some published version has not reached every live worker yet."""
        with self.cond:
            return self.versions.spreading()

    def wait_for_workers(self, count: int, timeout_s: float, still_starting: Callable[[], None]) -> None:
        """Block until ``count`` workers have registered; ``still_starting`` raises if they cannot."""
        with self.cond:
            self._wait(time.monotonic() + timeout_s,
                       lambda: self.counters["workers_registered"] >= count or still_starting())
            if self.counters["workers_registered"] < count:
                raise TimeoutError(f"waited {timeout_s:.0f}s for {count} local workers to register "
                                   f"({self.counters['workers_registered']} did)")

    # ---------------------------------------------------------------- reports and resume
    def stats(self, learner_price_per_hour: float, wall_s: float) -> RunStats:
        """Counters, activation and costs as the learner logs them (one consistent snapshot)."""
        with self.cond:
            return RunStats(
                groups_dropped_stale=self.ledger.dropped_stale, leases_expired=self.counters["leases_expired"],
                workers_registered=self.counters["workers_registered"], activation_need=self.fleet.need,
                costs=self.fleet.costs(learner_price_per_hour, wall_s),
                workers=self.registry.stats(), reward_seconds=self.scoring.seconds)

    def reliability(self) -> dict[str, int | dict[str, int]]:
        """The run's reliability report: what happened to every lease and every submitted group."""
        with self.cond:
            return reliability_report(self)

    def resume_snapshot(self) -> dict[str, Any]:
        """What a resumed learner needs of these books (see :mod:`echo2.coordinator.snapshot`)."""
        with self.cond:
            return snapshot.take(self)

    def restore_snapshot(self, data: dict[str, Any], examples: Iterator[Example]) -> None:
        """Put these fresh books (no workers, no leases) back where :meth:`resume_snapshot` left them."""
        with self.cond:
            snapshot.restore(self, data, examples)
            self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.finished = True
            if self.relay_checker is not None:
                self.relay_checker.close()
            self.cond.notify_all()
