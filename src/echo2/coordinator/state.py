"""The coordinator's state: one lock over the registry, the leases, the pacing ledger and the versions.

The HTTP handlers (threads of the server) and the learner loop (main thread) share it through a
:class:`threading.Condition`. Each job lives in its own module — workers and credentials
(:mod:`~echo2.coordinator.registry`), leases and submission checks
(:mod:`~echo2.coordinator.leases`), slots, buffer and re-queue (:mod:`echo2.core.pacing`, the same
ledger the simulator keeps), versions and relay plans (:mod:`~echo2.coordinator.versions`),
activation and billing (:mod:`~echo2.coordinator.fleet`), lease shares (:mod:`echo2.core.shares`). The
requests are sequenced over them by three sides of this class: the workers' comings and goings
(:mod:`~echo2.coordinator.membership`), leases and submissions (:mod:`~echo2.coordinator.work`),
the learner's batches (:mod:`~echo2.coordinator.batches`); this class holds the books, publishes
versions, waits for workers (every wait bounded) and reports. The learner sees it through :class:`echo2.exchange.RolloutSource`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from echo2.broadcast.topology import Planner, star_plan
from echo2.coordinator import snapshot
from echo2.coordinator.batches import LearnerSide
from echo2.coordinator.membership import Membership
from echo2.coordinator.cursor import CountingStream, TrainedDraws
from echo2.coordinator.fleet import Fleet
from echo2.coordinator.leases import LeaseBook
from echo2.coordinator.records import Limits, WorkerRecord
from echo2.coordinator.registry import WorkerRegistry
from echo2.coordinator.relay_check import RelayChecker
from echo2.coordinator.reliability import reliability_report
from echo2.coordinator.scoring import Environment, Scorer, Scoring
from echo2.coordinator.versions import VersionBook
from echo2.coordinator.work import WorkSide
from echo2.exchange import Group, RunStats
from echo2.core.pacing import PacingLedger
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import RunSpec, TimelineEvent, VersionInfo
from echo2.core.shares import SharePolicy
from echo2.tasks import Example


class CoordinatorState(Membership, WorkSide, LearnerSide):
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

    def _replan(self, reason: str) -> None:
        self.fleet.replan(self.registry.records(), *self.step_times, reason=reason)

    def replan(self, train_s: float, broadcast_s: float | None) -> None:
        """Re-apply cost-aware activation with the learner's latest step time and dissemination latency."""
        with self.cond:
            self.step_times = (train_s, broadcast_s if broadcast_s is not None else self.step_times[1])
            self._replan("periodic")
            self.cond.notify_all()

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
