"""The coordinator's state: the run's books and every request sequenced over them.

The HTTP handlers (threads of the server) and the learner loop (main thread) share it through a
:class:`threading.Condition`. Each job lives in its own module — workers and credentials
(:mod:`~echo2.coordinator.registry`), leases and submission checks
(:mod:`~echo2.coordinator.leases`), slots, buffer and re-queue (:mod:`echo2.core.pacing`, the same
ledger the simulator keeps), versions and relay plans (:mod:`~echo2.coordinator.versions`),
activation and billing (:mod:`~echo2.coordinator.fleet`), lease shares (:mod:`echo2.core.shares`),
the run clock (:mod:`echo2.core.run_clock`); they are held together, under one lock, by
:class:`~echo2.coordinator.books.CoordinatorBooks`. The requests are objects composed over those
books, each handed what it calls: the workers' comings and goings
(:class:`~echo2.coordinator.membership.Membership`), their leases and submissions
(:class:`~echo2.coordinator.work.WorkDesk`) and the learner's batches
(:class:`~echo2.coordinator.batches.LearnerDesk`). This class wires them (the HTTP handlers call
the members and the work desk themselves), is the learner's :class:`echo2.exchange.RolloutSource`,
publishes versions, waits for workers (every wait bounded) and reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from echo2.coordinator import snapshot
from echo2.coordinator.batches import LearnerDesk
from echo2.coordinator.books import CoordinatorBooks
from echo2.coordinator.membership import TRIAL_SEATS, Membership
from echo2.coordinator.records import Limits, WorkerRecord
from echo2.coordinator.reliability import reliability_report
from echo2.coordinator.sources import WorkSource
from echo2.coordinator.work import WorkDesk
from echo2.core.sample_queue import SampleWork
from echo2.core.shares import delivered
from echo2.exchange import GiveBack, Group, RunStats
from echo2.protocol import (
    RunSpec,
    VersionInfo,
)
from echo2.tasks import Example


class CoordinatorState:
    """Books of one run (:class:`~echo2.coordinator.books.CoordinatorBooks`, ``parts``) with every
    request sequenced over them: the workers' comings and goings (``members``), their leases and
    submissions (``work``), the learner's batches (``learner``), and here the versions it publishes
    and the reports. The arguments are the books' and the members' (``heartbeat_timeout_s``,
    ``trial_seats``)."""

    def __init__(self, spec: RunSpec, limits: Limits, *, heartbeat_timeout_s: float, trial_seats: int = TRIAL_SEATS,
                 **books: Any) -> None:
        """``books``: the keyword arguments of :class:`~echo2.coordinator.books.CoordinatorBooks`."""
        self.parts = CoordinatorBooks(spec, limits, **books)
        self.members = Membership(self.parts, heartbeat_timeout_s=heartbeat_timeout_s, trial_seats=trial_seats)
        self.work = WorkDesk(self.parts, self.members)
        self.learner = LearnerDesk(self.parts, self.members)
        # the parts others read (the app, the dashboard, the reports, tests); never reassigned
        self.books, self.registry, self.leases = self.parts.books, self.parts.registry, self.parts.leases
        self.cond = self.parts.cond
        self.spec, self.limits, self.fleet, self.versions = spec, limits, self.parts.fleet, self.parts.versions

    @property
    def version(self) -> int:
        return self.parts.version

    @property
    def finished(self) -> bool:
        return self.parts.finished

    # ---------------------------------------------------------------- the learner's view (RolloutSource)
    # the protocol the learner loop is written against; the desk and the members answer it
    def take_batch(self, step: int, timeout_s: float, count: int | None = None) -> list[Group]:
        return self.learner.take_batch(step, timeout_s, count)

    def give_back(self, groups: list[Group], reason: GiveBack, why: str = "", worker_id: str | None = None) -> None:
        self.learner.give_back(groups, reason, why, worker_id)

    def data_wait(self) -> str | None:
        return self.learner.data_wait()

    def quarantine(self, worker_id: str, reason: str, taken: list[Group] = ()) -> int:
        return self.members.quarantine(worker_id, reason, taken)

    # ---------------------------------------------------------------- sampling work (its sources)
    def add_source(self, source: WorkSource) -> None:
        """Take ``source``'s sampling work (:mod:`~echo2.coordinator.sources`): its requests may be
        queued from now on, and their outcomes go to it. Called by the part that built it over this
        coordinator (its desk needs the coordinator first), before the server starts."""
        with self.cond:
            if source.name in self.parts.sources:
                raise ValueError(f"a work source named {source.name!r} was added already")
            self.parts.sources[source.name] = source

    def queue_samples(self, works: list[SampleWork]) -> None:
        """Sampling requests for the fleet (:mod:`echo2.core.sample_queue`); a held lease request may take them now."""
        with self.cond:
            if unknown := {work.source for work in works} - set(self.parts.sources):
                raise ValueError(f"sampling requests of no added work source: {sorted(unknown)}")
            for work in works:
                self.books.samples.add(work)
            self.cond.notify_all()

    def requeue_samples(self, works: list[SampleWork]) -> None:
        """Requests whose results were not returned (a failed audit): first in line again, for another worker."""
        with self.cond:
            self.books.samples.add_front(works)
            self.cond.notify_all()

    def drop_samples(self, request_ids: set[str]) -> int:
        """Forget waiting requests whose client is gone; how many."""
        with self.cond:
            return self.books.samples.drop(request_ids)

    def delivered(self, worker_id: str) -> None:
        """A worker's sampling results passed their audit: it has delivered (out of its trial)."""
        with self.cond:
            if (record := self.registry.workers.get(worker_id)) is not None and not record.quarantined:
                delivered(record)

    def publish(self, info: VersionInfo) -> None:
        """Announce ``info.version`` (its chunks, and its delta's if any, are already served) and
        plan who relays it to whom. The step that made it is timed from the learner's last
        :meth:`take_batch` (the run clock), and every ``activation.replan_every`` versions the
        active fleet is re-planned with it."""
        with self.cond:
            self.versions.publish(info, self.registry.plan_nodes())
            if self.books.published(info.version, time.monotonic(), time.time()):  # its step's groups trained
                self.parts.replan("periodic")
            self.cond.notify_all()

    def version_info(self, record: WorkerRecord) -> VersionInfo:
        """The current version, with the sources ``record`` should fetch it from (parent first)."""
        with self.cond:
            return self.versions.info_for(self.version, record.worker_id, self.registry.relay_urls(),
                                          self.registry.relay_rates())

    def wait_for_workers(self, count: int, timeout_s: float, still_starting: Callable[[], None]) -> None:
        """Block until ``count`` workers have registered; ``still_starting`` raises if they cannot."""
        with self.cond:
            self.members.wait(time.monotonic() + timeout_s,
                              lambda: self.books.counters.workers_registered >= count or still_starting())
            if self.books.counters.workers_registered < count:
                raise TimeoutError(f"waited {timeout_s:.0f}s for {count} local workers to register "
                                   f"({self.books.counters.workers_registered} did)")

    # ---------------------------------------------------------------- reports and resume
    def stats(self, learner_price_per_hour: float, wall_s: float, settle_s: float = 0.0) -> RunStats:
        """Counters, activation, costs and the disseminations finished since the last report, as the
        learner logs them (one consistent snapshot). ``settle_s`` > 0 (end of run) first waits that
        long at most for the versions still spreading, so that a short run's last ones are measured too."""
        with self.cond:
            self.members.wait(time.monotonic() + settle_s, self._settled)  # times what spread so far, at least once
            disseminated, self.parts.disseminated = self.parts.disseminated, []
            return RunStats(
                groups_dropped_stale=self.books.ledger.dropped_stale, leases_expired=self.books.counters.leases_expired,
                workers_registered=self.books.counters.workers_registered, activation_need=self.fleet.need,
                costs=self.fleet.costs(learner_price_per_hour, wall_s),
                workers=self.registry.stats(), reward_seconds=self.parts.scoring.seconds, disseminated=disseminated,
                sections={name: source.report() for name, source in self.parts.sources.items()})

    def _settled(self) -> bool:
        self.parts.time_dissemination()
        return not self.books.census.spreading()

    def reliability(self) -> dict[str, int | dict[str, int]]:
        """The run's reliability report: what happened to every lease and every submitted group."""
        with self.cond:
            return reliability_report(self.parts)

    def resume_snapshot(self) -> dict[str, Any]:
        """What a resumed learner needs of these books (see :mod:`echo2.coordinator.snapshot`)."""
        with self.cond:
            return snapshot.take(self.parts)

    def restore_snapshot(self, data: dict[str, Any], examples: Iterator[Example]) -> None:
        """Put these fresh books (no workers, no leases) back where :meth:`resume_snapshot` left them."""
        with self.cond:
            snapshot.restore(self.parts, data, examples)
            self.cond.notify_all()

    def finish(self) -> None:
        """Training is over: heartbeats and lease requests tell the workers to stop (twice is once)."""
        with self.cond:
            self.parts.books.finished = True
            if self.parts.relay_checker is not None:
                self.parts.relay_checker.close()
            self.cond.notify_all()
