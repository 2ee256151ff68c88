"""The coordinator's state: the run's books and every request sequenced over them.

The HTTP handlers (threads of the server) and the learner loop (main thread) share it through a
:class:`threading.Condition`. Each job lives in its own module — workers and credentials
(:mod:`~echo2.coordinator.registry`), leases and submission checks
(:mod:`~echo2.coordinator.leases`), slots, buffer and re-queue (:mod:`echo2.core.pacing`, the same
ledger the simulator keeps), versions and relay plans (:mod:`~echo2.coordinator.versions`),
activation and billing (:mod:`~echo2.coordinator.fleet`), lease shares (:mod:`echo2.core.shares`),
the run clock (:mod:`echo2.core.run_clock`); they are held together, under one lock, by
:class:`~echo2.coordinator.books.Books`. The requests are layered over the books: the workers'
comings and goings (:mod:`~echo2.coordinator.membership`), then their leases and submissions
(:mod:`~echo2.coordinator.work`) and the learner's batches (:mod:`~echo2.coordinator.batches`);
this class publishes versions, waits for workers (every wait bounded) and reports. The learner
sees it through :class:`echo2.exchange.RolloutSource`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from echo2.coordinator import snapshot
from echo2.coordinator.batches import LearnerSide
from echo2.coordinator.records import WorkerRecord
from echo2.coordinator.reliability import reliability_report
from echo2.coordinator.work import WorkSide
from echo2.exchange import RunStats
from echo2.protocol import VersionInfo
from echo2.tasks import Example


class CoordinatorState(WorkSide, LearnerSide):
    """Books of one run (:class:`~echo2.coordinator.books.Books`) with every request sequenced over
    them: the workers' comings and goings, their leases and submissions, the learner's batches,
    and here the versions it publishes and the reports."""

    def publish(self, info: VersionInfo) -> None:
        """Announce ``info.version`` (its chunks, and its delta's if any, are already served) and
        plan who relays it to whom. The step that made it is timed from the learner's last
        :meth:`take_batch` (the run clock), and every ``activation.replan_every`` versions the
        active fleet is re-planned with it."""
        with self.cond:
            self.versions.publish(info, self.registry.plan_nodes())
            if self.books.published(info.version, time.monotonic(), time.time()):  # its step's groups trained
                self._replan("periodic")
            self.cond.notify_all()

    def version_info(self, record: WorkerRecord) -> VersionInfo:
        """The current version, with the sources ``record`` should fetch it from (parent first)."""
        with self.cond:
            return self.versions.info_for(self.version, record.worker_id, self.registry.relay_urls(),
                                          self.registry.relay_rates())

    def wait_for_workers(self, count: int, timeout_s: float, still_starting: Callable[[], None]) -> None:
        """Block until ``count`` workers have registered; ``still_starting`` raises if they cannot."""
        with self.cond:
            self._wait(time.monotonic() + timeout_s,
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
            self._wait(time.monotonic() + settle_s, self._settled)  # times what spread so far, at least once
            disseminated, self.disseminated = self.disseminated, []
            return RunStats(
                groups_dropped_stale=self.books.ledger.dropped_stale, leases_expired=self.books.counters.leases_expired,
                workers_registered=self.books.counters.workers_registered, activation_need=self.fleet.need,
                costs=self.fleet.costs(learner_price_per_hour, wall_s),
                workers=self.registry.stats(), reward_seconds=self.scoring.seconds, disseminated=disseminated)

    def _settled(self) -> bool:
        self._time_dissemination()
        return not self.books.census.spreading()

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
        """Training is over: heartbeats and lease requests tell the workers to stop (twice is once)."""
        with self.cond:
            self.books.finished = True
            if self.relay_checker is not None:
                self.relay_checker.close()
            self.cond.notify_all()
