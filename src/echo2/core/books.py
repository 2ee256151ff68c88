"""The run's books: one object the coordinator and the simulator both keep and move the same way.

ECHO-2 (arXiv 2602.02192) paces a run by its books: which prompt slots are out on which lease,
which groups wait for the learner, what each worker delivered or let expire, how long a step and
a version's trip take. The coordinator keeps them under its lock, in ``time.monotonic()``
seconds, and the simulator in simulated seconds; both call the operations here, so that a grant,
a submission, an expiry, a batch, a publish and the census come out the same in both
(``tests/unit/core/test_books.py`` drives one sequence through each side and compares the books).

What the books hold: the pacing ledger (:mod:`~echo2.core.pacing`), the lease shares
(:mod:`~echo2.core.shares`), the run clock (:mod:`~echo2.core.run_clock`), the dissemination
census (:mod:`~echo2.core.dissemination`), the active leases, the groups in the learner's step and
the typed counters. What they do not: I/O, waiting, credentials, scoring, relay plans, billing —
each side's own. Clock-free: every operation is given the time (``now`` in the books' clock,
``at`` in the census's, which the coordinator keeps in wall time because workers report in it).

A lease's work carries its kind (:data:`WorkKind`): a task's prompt slot, paced by the staleness
window, or a training service client's sampling request (:mod:`~echo2.core.sample_queue`), served
first come, first served to any worker that holds its weights.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Generic, Literal, Protocol, TypeVar

from echo2.core.dissemination import DisseminationCensus, Reached
from echo2.core.leasing import LeaseAnswer, Requests, answer_lease
from echo2.core.pacing import PacingLedger
from echo2.core.profiling import LeaseCycle
from echo2.core.run_clock import RunClock
from echo2.core.sample_queue import SampleQueue
from echo2.core.shares import (
    SharePolicy,
    delivered,
    dropped_stale,
    group_seconds,
    missed,
)

WorkKind = Literal["prompt", "sample"]
"""What a lease's slots carry: ``prompt``, a task example whose group the learner trains on;
``sample``, a sampling request of a training service's client (:class:`~echo2.core.sample_queue.SampleWork`)."""

LeaseState = Literal["active", "done", "expired", "failed"]

P = TypeVar("P")


@dataclass
class Counters:
    """What happened to the run's workers, leases and groups, as the reliability report counts it
    (typed: a misspelt name fails, where a string key made a new zero)."""

    workers_registered: int = 0
    workers_dead: int = 0
    workers_left: int = 0
    workers_quarantined: int = 0
    registrations_refused_trial: int = 0
    leases_issued: int = 0
    leases_completed: int = 0
    """Submitted and accepted (delivered only once a group of it is trained)."""
    leases_expired: int = 0
    """Ended unsubmitted: past their deadline, their worker dead, gone or quarantined."""
    leases_failed: int = 0
    """Handed back by their worker, which could not carry them out (it said why)."""
    requests_poisoned: int = 0
    """Sampling requests refused after their leases failed on two workers (:data:`~echo2.core.sample_queue.POISON_AFTER`)."""
    leases_lost_in_restart: int = 0
    groups_accepted: int = 0
    groups_trained: int = 0
    groups_trained_twice: int = 0
    groups_filtered: int = 0
    groups_discarded_quarantined: int = 0
    groups_discarded_unauditable: int = 0
    groups_rejected_expired_lease: int = 0
    """Groups of submissions that came after their lease expired (the simulator's count; the
    coordinator counts refusals by code)."""
    duplicate_submissions: int = 0
    learner_restarts: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, saved: Mapping[str, int]) -> None:
        """Add counts saved by :meth:`as_dict` (a resumed run's books); an unknown name is an error."""
        known = {f.name for f in fields(self)}
        if unknown := sorted(set(saved) - known):
            raise ValueError(f"counters {unknown} are not the books' ({sorted(known)})")
        for name, value in saved.items():
            setattr(self, name, getattr(self, name) + value)


class BookedWorker(Protocol):
    """A worker as the books read and move it (the coordinator's record, the simulator's worker)."""

    worker_id: str
    active: bool
    """Activation keeps it working (False: parked)."""
    quarantined: bool
    throughput: float | None
    unfulfilled: int
    parked_until: float
    proven: bool
    groups_delivered: int
    cycle: LeaseCycle

    @property
    def at_work(self) -> bool:
        """Running, trusted and active: it takes leases and the census waits for it."""


@dataclass(eq=False)
class Lease(Generic[P]):
    """Slots granted to one worker at one policy version, until ``deadline``."""

    lease_id: str
    worker_id: str
    version: int
    slots: dict[int, P]
    """Slot -> what it carries (the coordinator: the task's example; the simulator: nothing)."""
    granted_at: float
    deadline: float
    kind: WorkKind = "prompt"
    state: LeaseState = "active"
    answered: set[int] = field(default_factory=set)
    """Slots whose groups were accepted already: a streaming worker answers a lease group by group
    as each group's rows finish (:meth:`Books.answered`), and the lease is done when none is left."""
    rollouts: int = 0
    """Rollouts answered so far (the lease cycle's throughput takes them in when it is done)."""

    @property
    def unanswered(self) -> dict[int, P]:
        """The slots still out (what an expiry or a failure hands back)."""
        return {slot: work for slot, work in self.slots.items() if slot not in self.answered}


W = TypeVar("W", bound=BookedWorker)
G = TypeVar("G")
L = TypeVar("L", bound=Lease)


class Books(Generic[W, G]):
    """``workers``: the run's workers by id (the books read them, the caller adds them);
    ``workers_of``: the ids of the workers that generated a group (one, or an agent's group: one per
    call's worker; an id the books do not know: the learner's own, before a resume); ``on_parked(worker, seconds, why)``: told when a miss parks a worker; ``prompts``:
    whether a task's prompts are leased (False: a training service's fleet, sampling requests only)."""

    def __init__(self, workers: Mapping[str, W], workers_of: Callable[[G], Iterable[str]], *, staleness: int,
                 groups_per_step: int, group_size: int, shares: SharePolicy, lease_timeout_s: float,
                 replan_every: int, train_s: float | None = None, lease_ids: Callable[[], str] | None = None,
                 on_parked: Callable[[W, float, str], None] = lambda worker, seconds, why: None,
                 prompts: bool = True) -> None:
        self.workers, self.workers_of, self.prompts = workers, workers_of, prompts
        self.samples = SampleQueue()
        """Sampling requests waiting for a worker (:mod:`~echo2.core.sample_queue`)."""
        self.ledger: PacingLedger[Any, G] = PacingLedger(staleness, groups_per_step)
        self.shares, self.group_size, self.lease_timeout_s = shares, group_size, lease_timeout_s
        self.clock = RunClock(replan_every, train_s=train_s)
        self.census = DisseminationCensus()
        self.counters = Counters()
        self.rejected: Counter[str] = Counter()
        """Submissions refused, by code."""
        self.in_training: list[G] = []
        """The groups of the learner's step in hand: trained by the time it publishes."""
        self.finished = False
        self._leases: dict[str, list[Lease]] = {}
        """Active leases, by worker id."""
        self._unclocked: list[float] = []
        """Dissemination latencies not yet given to the run clock."""
        counter = itertools.count()
        self._lease_id = lease_ids or (lambda: str(next(counter)))
        self._on_parked = on_parked

    @property
    def version(self) -> int:
        """The learner's newest published version."""
        return self.ledger.version

    # ------------------------------------------------------------------ workers
    def others_proven(self, worker: W) -> bool:
        """Whether a worker at work other than ``worker`` has delivered: probation applies only then
        (:func:`echo2.core.shares.on_probation`)."""
        return any(w is not worker and w.at_work and w.proven for w in self.workers.values())

    # ------------------------------------------------------------------ leases
    def active_leases(self, worker_id: str | None = None) -> list[Lease]:
        """Active leases, of ``worker_id`` only when given."""
        if worker_id is not None:
            return list(self._leases.get(worker_id, ()))
        return [lease for leases in self._leases.values() for lease in leases]

    def overdue(self, now: float) -> list[Lease]:
        return [lease for lease in self.active_leases() if now > lease.deadline]

    def answer(self, worker: W, *, worker_version: int, requested: int, now: float) -> LeaseAnswer:
        """:func:`echo2.core.leasing.answer_lease` for ``worker`` at ``worker_version`` asking for
        ``requested`` groups (its own ask: the live worker's ``max_groups``), over these books at ``now``."""
        held = sum(len(lease.slots) for lease in self._leases.get(worker.worker_id, ()))
        others = [w for w in self.workers.values() if w is not worker and w.at_work]
        proven = [w for w in others if w.proven]
        group_s = group_seconds(self.group_size, worker.throughput, [w.throughput for w in proven if w.throughput])
        requests: Requests = ("none" if not self.samples else "servable" if self.samples.servable(worker_version)
                              else "newer")
        untrained = 0  # counted only where a task lease may follow (sampling requests come first)
        if requests == "none" and not worker.proven and any(self._working(w, now) for w in proven):
            mine = worker.worker_id
            untrained = (self.ledger.buffered(lambda group: mine in self.workers_of(group))
                         + sum(mine in self.workers_of(group) for group in self.in_training))
        return answer_lease(self.ledger if self.prompts else None, self.shares, worker, worker_version=worker_version,
                            requested=requested, held=held, active=worker.active, others_live=bool(others), now=now,
                            lease_timeout_s=self.lease_timeout_s, group_s=group_s, others_proven=bool(proven),
                            finished=self.finished, untrained=untrained, requests=requests)

    def _working(self, worker: W, now: float) -> bool:
        """``worker`` holds a lease, or began its current lease cycle (a submission, a grant after a
        wait) within ``lease_timeout_s`` of ``now``: it can fill the learner's batch while a newcomer
        waits for its own group to be trained (:func:`~echo2.core.shares.lease_size`'s ``untrained``).
        A proven identity that took no lease for that long (one that only heartbeats) is no cover:
        counted as one, it left honest newcomers one untrained group each, short of a batch, and
        starved a run at step 0. Holding a lease alone is not the test: an honest worker holds none
        between its submission and its next grant, and newcomers lent another group in that gap
        overran the window (dropped as stale)."""
        began = worker.cycle.began_at
        return worker.worker_id in self._leases or (began is not None and now - began < self.lease_timeout_s)

    def grant(self, worker: W, worker_version: int, answer: LeaseAnswer, now: float, draw: Callable[[], Any],
              make: Callable[..., L] = Lease) -> L:
        """A ``granted`` ``answer`` carried out: its slots from the ledger (prompts re-queued first,
        then ``draw()``) or, for sampling work, from the sample queue, bound to ``worker`` until
        ``answer.deadline_s`` from ``now``; ``make`` builds the lease (a side's subclass of :class:`Lease`)."""
        if answer.kind == "sample":
            slots = self.samples.take(worker_version, answer.size)
        else:
            slots = self.ledger.grant(worker_version, answer.size, draw, answer.lent)
        lease = make(lease_id=self._lease_id(), worker_id=worker.worker_id, version=worker_version, slots=slots,
                     granted_at=now, deadline=now + answer.deadline_s, kind=answer.kind)
        self._leases.setdefault(worker.worker_id, []).append(lease)
        self.counters.leases_issued += 1
        return lease

    def submitted(self, lease: Lease, groups: Iterable[tuple[int, G]], rollouts: int, now: float) -> None:
        """``lease``'s submission, all its work at once, was accepted at ``now``: its ``groups``
        (slot, group) enter the buffer and the lease is done (:meth:`answered`, the rest of it)."""
        self.answered(lease, list(lease.unanswered), groups, rollouts, now)

    def answered(self, lease: Lease, slots: Iterable[int], groups: Iterable[tuple[int, G]], rollouts: int,
                 now: float) -> bool:
        """``slots`` of ``lease`` were answered at ``now`` with ``groups`` (slot, group; the
        accepted ones, which enter the buffer) and ``rollouts`` rollouts: a streaming worker submits
        each group the moment its rows are done, so a lease may be answered in parts. Once none of
        its slots is left it is done, and its worker's throughput takes in the whole lease cycle
        (:mod:`echo2.core.profiling`). Returns whether it is done."""
        lease.answered.update(slots)
        lease.rollouts += rollouts
        if lease.kind == "prompt":
            admitted = 0
            for slot, group in groups:
                self.ledger.admit(slot, lease.version, group)
                admitted += 1
            self.counters.groups_accepted += admitted
        if lease.unanswered:
            return False
        self._close(lease, "done")
        worker = self.workers[lease.worker_id]
        worker.throughput = worker.cycle.submitted(now, lease.granted_at, lease.rollouts, worker.throughput)
        self.counters.leases_completed += 1
        if lease.kind == "sample":
            self.samples.settled(lease.slots.values())
        return True

    def expire(self, lease: Lease, now: float, missed_deadline: bool) -> None:
        """``lease`` ends unsubmitted (past its deadline, or its worker dead, gone, quarantined): its
        prompts go back to the front of the queue; past its deadline (``missed_deadline``) it is
        its worker's miss (:func:`echo2.core.shares.missed`). Twice is once."""
        if lease.state != "active":
            return
        self._close(lease, "expired")
        self.counters.leases_expired += 1
        if lease.kind == "sample":
            self.samples.release(lease.unanswered)
        else:
            self.ledger.release(lease.unanswered, front=True)
        if missed_deadline and (worker := self.workers.get(lease.worker_id)) is not None:
            if parked_s := missed(self.shares, worker, now, self.lease_timeout_s):
                self._on_parked(worker, parked_s, f"let {worker.unfulfilled} leases in a row expire")

    def failed(self, lease: Lease, now: float) -> list[Any]:
        """``lease``'s worker handed it back: it could not carry it out (a request that crashed its
        engine, say). Its prompts go back to the front of the queue and its sampling requests too,
        but for those that have now failed on two workers: poisoned, returned for the caller to
        refuse (:meth:`~echo2.core.sample_queue.SampleQueue.failed`). A task's lease that failed is
        its worker's miss, as an expiry is (:func:`echo2.core.shares.missed`): the run's own prompts
        do not break an honest engine, so a worker that fails them is parked, not fed the queue. A
        sampling lease's failure is not: its request is a client's and may be what failed, and a
        client sending such requests would otherwise park every worker in turn. Not active
        (submitted, expired): nothing, ``[]``."""
        if lease.state != "active":
            return []
        self._close(lease, "failed")
        self.counters.leases_failed += 1
        if lease.kind == "sample":
            poisoned = self.samples.failed(lease.unanswered, lease.worker_id)
            self.counters.requests_poisoned += len(poisoned)
            return poisoned
        self.ledger.release(lease.unanswered, front=True)
        if (worker := self.workers.get(lease.worker_id)) is not None:
            if parked_s := missed(self.shares, worker, now, self.lease_timeout_s):
                self._on_parked(worker, parked_s, f"failed or let expire {worker.unfulfilled} leases in a row")
        return []

    # ------------------------------------------------------------------ groups played call by call
    def open_group(self, draw: Callable[[], Any]) -> tuple[int, Any] | None:
        """One prompt slot for a group that is not leased as a whole (an agent's episodes, each call
        of them leased on its own): granted at the newest version when the staleness window has room
        (re-queued prompts first, then ``draw()``), as a lease's slots are; None while it is full."""
        if self.finished or self.ledger.grantable(self.version) != "granted":
            return None
        (slot, prompt), = self.ledger.grant(self.version, 1, draw).items()
        return slot, prompt

    def admit_group(self, slot: int, version: int, group: G) -> None:
        """An opened group, played out, enters the learner's buffer as a submitted lease's groups do."""
        self.ledger.admit(slot, version, group)
        self.counters.groups_accepted += 1

    def drop_group(self, slot: int, quarantined: bool = False) -> None:
        """An opened group will not be trained (an episode unrewarded, abandoned, or sampled by a
        ``quarantined`` worker): its prompt goes back to the front of the queue, as a lost lease's do."""
        self.ledger.release([slot], front=True)
        if quarantined:
            self.counters.groups_discarded_quarantined += 1

    def _close(self, lease: Lease, state: LeaseState) -> None:
        lease.state = state
        held = self._leases.get(lease.worker_id, [])
        if lease in held:
            held.remove(lease)
        if not held:
            self._leases.pop(lease.worker_id, None)

    # ------------------------------------------------------------------ the learner
    def take(self, step: int, count: int, now: float) -> list[G] | None:
        """The learner's batch for ``step`` (:meth:`PacingLedger.take`), its step timed from ``now``;
        a group dropped as stale is a miss of its worker if on probation (:func:`~echo2.core.shares.dropped_stale`)."""
        batch = self.ledger.take(step, count, lambda group: self._dropped_stale(group, now))
        if batch is not None:
            self.clock.batch_taken(now)
            self.counters.groups_trained += len(batch)
            self.in_training += batch
        return batch

    def _dropped_stale(self, group: G, now: float) -> None:
        for worker in self._trusted_workers_of(group):
            if parked_s := dropped_stale(self.shares, worker, self.others_proven(worker), now, self.lease_timeout_s):
                self._on_parked(worker, parked_s, "on trial, submitted a group too old to train")

    def _trusted_workers_of(self, group: G) -> list[W]:
        known = [self.workers.get(worker_id) for worker_id in self.workers_of(group)]
        return [worker for worker in known if worker is not None and not worker.quarantined]

    def published(self, version: int, now: float, at: float) -> bool:
        """The learner published ``version`` at ``now`` (``at`` in the census's clock): the groups of
        its step were trained, so their workers delivered (:func:`~echo2.core.shares.delivered`).
        Returns whether activation is due its periodic re-plan (:meth:`RunClock.published`)."""
        for group in self.in_training:
            for worker in self._trusted_workers_of(group):
                delivered(worker)
        self.in_training = []
        self.ledger.version = version
        self.census.publish(version, at)
        return self.clock.published(version, now)

    # ------------------------------------------------------------------ the census
    def hold(self, worker: W, version: int | None, at: float) -> list[Reached]:
        """``worker`` holds ``version`` (its newest loaded; None or below 0: none) from ``at`` on. The
        census counts it only while at work (a parked, dead or quarantined worker generates
        nothing, so no version waits for it); reports may come out of order, so it holds the
        newest it reported. Returns the versions that have now reached every counted worker."""
        if version is None or version < 0 or not worker.at_work:
            reached = self.census.hold(worker.worker_id, None, at)
        else:
            self.census.loaded(version)
            reached = self.census.hold(worker.worker_id, max(self.census.holding.get(worker.worker_id, -1), version),
                                       at)
        self._unclocked += [r.reached - r.published for r in reached]
        return reached

    def time_dissemination(self) -> list[float]:
        """The dissemination latencies completed since the last call, the slowest of them one
        sample of ``T_bcast`` for the run clock (:meth:`RunClock.disseminated`)."""
        latencies, self._unclocked = self._unclocked, []
        self.clock.disseminated(latencies)
        return latencies
