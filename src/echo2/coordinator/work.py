"""Leases and submissions in the coordinator's books: a lease request answered by the core
(:func:`echo2.core.leasing.answer_lease`) and held open while its answer may still change; a
submission checked against its lease under the lock, scored outside it, admitted under it; the
environment's answers between an episode's turns."""

from __future__ import annotations

import logging
import time

from echo2.coordinator.books import CoordinatorBooks
from echo2.coordinator.leases import accepted_groups
from echo2.coordinator.membership import Membership
from echo2.coordinator.records import Lease, Rejected, WorkerRecord
from echo2.core.leasing import LeaseAnswer
from echo2.core.shares import on_probation
from echo2.protocol import (
    LeasedPrompt,
    LeaseFailure,
    LeaseResponse,
    RespondRequest,
    RespondResponse,
    SampleResult,
    SubmitRequest,
    SubmitResponse,
)

log = logging.getLogger("echo2")

#: Lease requests held open at once, over all workers: the HTTP server runs requests on a pool
#: of 40 threads (anyio's default), and a swarm's long-polls had held all of them, so that honest
#: workers' submissions, heartbeats and the dashboard queued behind (lease answers up to 25 s).
MAX_LONG_POLLS = 24

#: A lease request answered at once with ``retry_after_s`` (not held open) makes the next one
#: refused (429, :mod:`echo2.coordinator.app`) until this share of that time has passed: a swarm's
#: identities parked or on trial asked every half second whatever they were told, ~140 full
#: requests a second in the learner's process. An honest worker waits the whole time out.
EARLY_ASK_SHARE = 0.5


class WorkDesk:
    """The workers' leases and submissions in ``parts``; ``members`` waits (reaping meanwhile)
    and records the timeline events a submission carries."""

    def __init__(self, parts: CoordinatorBooks, members: Membership) -> None:
        self.parts, self.members = parts, members
        self.long_polls = 0
        """Lease requests held open now (at most :data:`MAX_LONG_POLLS`)."""

    def _answer(self, record: WorkerRecord, worker_version: int, requested: int) -> LeaseAnswer:
        """The books' answer (:meth:`echo2.core.books.Books.answer`) to ``record``, now."""
        return self.parts.books.answer(record, worker_version=worker_version, requested=requested, now=time.monotonic())

    def lease(self, record: WorkerRecord, worker_version: int, max_groups: int, wait_s: float) -> LeaseResponse:
        deadline = time.monotonic() + wait_s
        with self.parts.cond:
            if record.quarantined:
                raise Rejected(403, "this worker is quarantined: its results failed verification", "quarantined")
            record.last_seen = time.monotonic()
            record.version = worker_version
            if worker_version > self.parts.version:
                raise Rejected(409, f"version {worker_version} is newer than the published {self.parts.version}", "bad_version")
            answer = self._answer(record, worker_version, max_groups)
            if not answer.final and self._may_hold_open(record, wait_s):
                record.cycle.answered(answer.status, time.monotonic())
                self.long_polls += 1
                record.polling = True
                try:
                    self.members.wait(deadline, lambda: self._answer(record, worker_version, max_groups).final)
                finally:
                    self.long_polls -= 1
                    record.polling = False
                answer = self._answer(record, worker_version, max_groups)
            elif not answer.final:  # answered at once: the worker waits the long-poll out on its side
                record.cycle.answered(answer.status, time.monotonic())
                record.ask_again_at = time.monotonic() + wait_s * EARLY_ASK_SHARE
                return LeaseResponse(status=answer.status, latest_version=self.parts.version, retry_after_s=wait_s)
            record.cycle.answered(answer.status, time.monotonic())
            if answer.status != "granted":
                return LeaseResponse(status=answer.status, latest_version=self.parts.version)
            lease = self.parts.books.grant(record, worker_version, answer, time.monotonic(), lambda: next(self.parts.examples),
                                     make=Lease)
            self.parts.leases.add(lease)
            granted = dict(status="granted", latest_version=self.parts.version, lease_id=lease.lease_id,
                           version=worker_version, deadline_s=answer.deadline_s, draw_seed=lease.draw_seed)
            if lease.kind == "sample":
                return LeaseResponse(**granted, samples=[w.request.model_copy(update={"slot": s})
                                                         for s, w in lease.slots.items()])
            return LeaseResponse(**granted, prompts=[LeasedPrompt(slot=s, prompt=e.prompt) for s, e in lease.slots.items()])

    def _may_hold_open(self, record: WorkerRecord, wait_s: float) -> bool:
        """Whether a ``wait`` or ``parked`` answer is held open (a long-poll) rather than given at
        once with a ``retry_after_s``. Held open only where others' progress may grant it soon (a
        step frees the window, another lease's submission frees the worker's share, a re-plan
        activates it): never for a worker parked for its misses nor one on probation holding its
        one lease (only time, its own submission or the lease's expiry changes their answers, and a
        swarm of such identities held every server thread), one long-poll per worker (a flood of
        them from one identity took the server), and at most :data:`MAX_LONG_POLLS` in all."""
        if (wait_s <= 0 or time.monotonic() < record.parked_until or record.polling
                or self.long_polls >= MAX_LONG_POLLS):
            return False
        covered = self.parts.books.others_proven(record)
        return not (on_probation(self.parts.books.shares, record, covered) and self.parts.books.active_leases(record.worker_id))

    def submit(self, record: WorkerRecord, request: SubmitRequest) -> SubmitResponse:
        """Checked under the lock, scored outside it (:mod:`~echo2.coordinator.scoring`), admitted under it."""
        with self.parts.cond:
            record.last_seen = time.monotonic()
            record.ask_again_at = 0.0  # its own submission may change its next answer
            lease = self.parts.leases.claim(request, record, self.parts.limits, self.parts.version)
            if lease is None:  # a copy of a lease already submitted or still being scored
                self.parts.books.counters.duplicate_submissions += 1
                return SubmitResponse(accepted=0, duplicate=True)
            if lease.kind == "sample":
                return self._sampled(record, lease, request)
        rewards = self.parts.scoring.rewards(lease, request)  # outside the lock (or why it could not be scored)
        with self.parts.cond:
            self.parts.leases.settle(lease, record, request, rewards)
            now = time.monotonic()  # delivered once a group of it is trained (the learner's publish)
            self.parts.books.answered(lease, [g.slot for g in request.groups],
                                      [(g.slot, g) for g in accepted_groups(lease, record.worker_id, request, rewards)],
                                      sum(len(g.completions) for g in request.groups), now)
            record.count(request, now - lease.granted_at)
            self.members.record_events(record, request.events)
            self.parts.cond.notify_all()
            return SubmitResponse(accepted=len(request.groups))

    def _sampled(self, record: WorkerRecord, lease: Lease, request: SubmitRequest) -> SubmitResponse:
        """A checked sampling lease (call locked): closed in the books, its results handed to the
        work sources that queued them (:mod:`~echo2.coordinator.sources`: a training service audits
        them before any client sees them, see :mod:`echo2.service.sampling`)."""
        lease.scoring.clear()
        now = time.monotonic()
        self.parts.books.submitted(lease, [], sum(len(r.sequences) for r in request.samples), now)
        record.count(request, now - lease.granted_at)
        self.members.record_events(record, request.events)
        by_source: dict[str, list[SampleResult]] = {}
        for result in request.samples:
            by_source.setdefault(lease.slots[result.slot].source, []).append(result)
        for name, results in by_source.items():
            self.parts.sources[name].results(record.worker_id, lease, results)
        self.parts.cond.notify_all()
        return SubmitResponse(accepted=len(request.samples))

    def fail(self, record: WorkerRecord, failure: LeaseFailure) -> None:
        """``record`` hands back its active lease ``failure.lease_id``, which it could not carry out
        (:meth:`echo2.core.books.Books.failed`): the work goes to another worker; a sampling request
        that has now failed on two workers is refused to its client with the reason (a poison pill:
        never re-issued). A lease already ended (expired, submitted) is nothing to hand back."""
        with self.parts.cond:
            record.last_seen = time.monotonic()
            lease = self.parts.leases.get(failure.lease_id)
            if lease is None or lease.worker_id != record.worker_id:
                raise Rejected(404, f"lease {failure.lease_id!r} is not one of yours", "unknown_lease")
            record.last_error = f"lease failed: {failure.reason}"
            poisoned = self.parts.books.failed(lease, time.monotonic())
            log.warning("worker %s handed back lease %s (%d slots): %s", record.name, lease.lease_id,
                        len(lease.slots), failure.reason)
            for work in poisoned:
                self.parts.sources[work.source].refused(work, f"it failed on two workers, the last saying: {failure.reason}")
            self.parts.cond.notify_all()

    def respond(self, record: WorkerRecord, request: RespondRequest) -> RespondResponse:
        """The environment's next answers, computed outside the lock and kept on the lease (checked at submission)."""
        with self.parts.cond:
            record.last_seen = time.monotonic()
            lease = self.parts.leases.playing(request, record, self.parts.limits)
            asked = [i for i in request.items if (i.slot, tuple(i.replies)) not in lease.answers]  # a retry: kept
        answers = self.parts.scoring.answers(lease, request.model_copy(update={"items": asked})) if asked else []
        with self.parts.cond:
            lease.answers.update(((i.slot, tuple(i.replies)), a) for i, a in zip(asked, answers, strict=True))
            return RespondResponse(observations=[lease.answers[(i.slot, tuple(i.replies))] for i in request.items])
