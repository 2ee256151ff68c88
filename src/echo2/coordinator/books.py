"""The coordinator's books, one lock over them: the registry, the leases, the pacing ledger, the
versions, the run clock, activation and the counters, and the few moves every side makes on them.

Each kind of request is a layer over these books: the workers' comings and goings
(:mod:`~echo2.coordinator.membership`), then their leases and submissions
(:mod:`~echo2.coordinator.work`) and the learner's batches (:mod:`~echo2.coordinator.batches`),
joined in :class:`echo2.coordinator.state.CoordinatorState`. Each layer imports only the one below.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from echo2.broadcast.topology import Planner, star_plan
from echo2.coordinator.cursor import CountingStream, TrainedDraws
from echo2.coordinator.fleet import Fleet
from echo2.coordinator.leases import LeaseBook
from echo2.coordinator.records import Lease, Limits
from echo2.coordinator.registry import WorkerRegistry
from echo2.coordinator.relay_check import RelayChecker
from echo2.coordinator.scoring import Environment, Scorer, Scoring
from echo2.coordinator.versions import VersionBook
from echo2.core.pacing import PacingLedger
from echo2.core.run_clock import RunClock
from echo2.core.shares import SharePolicy
from echo2.net.ratelimit import RateLimiter
from echo2.exchange import Group
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import RunSpec
from echo2.tasks import Example

#: Timeline events one worker may write into ``timeline.jsonl`` (burst, per minute): 20 a second,
#: far above an honest worker's one interval per lease or fetch. A line is about 120 bytes, so a
#: worker adds at most ~2.4 kB/s (after a burst of 200 lines) whatever it sends; one had added
#: 7.6 MB/s. Events past it are counted (``timeline_events_dropped``) and still counted in the
#: dissemination census: only their drawing is left out.
TIMELINE_EVENTS = (200, 1200.0)

#: Identities on trial a run admits at once at least (:meth:`echo2.coordinator.membership.Membership.register`).
TRIAL_SEATS = 16

Interval = Callable[[str, str, float, float, int], None]
"""Writes one interval of the run's timeline: who, what, start, end, version."""


class Books:
    """The books of one run, one lock over them. ``examples`` is the task's endless training
    stream (the data cursor); ``check_relays``: peers go to a relay only once it answered as its
    worker (:mod:`.relay_check`)."""

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
        on_interval: Interval = lambda who, kind, start, end, version: None,
        planner: Planner = star_plan,
        fleet: Fleet | None = None,
        window_share: float = 0.5,
        check_relays: bool = False,
        replan_every: int = 1,
        trial_seats: int = TRIAL_SEATS,
    ) -> None:
        self.spec, self.limits = spec, limits
        self.shares = SharePolicy(groups_per_lease=spec.groups_per_lease, window_share=window_share,
                                  grows_with_delivery=spec.size_leases_to_device)
        self.scoring = Scoring(score, environment)  # rewards and environment answers: the coordinator's own
        self.staleness, self.groups_per_step = spec.staleness, groups_per_step
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.on_interval = on_interval
        self.fleet = fleet or Fleet(ActivationPolicy(enabled=False, rollouts_per_step=1, staleness=spec.staleness))
        self.clock = RunClock(replan_every)
        self.disseminated: list[float] = []
        """Dissemination latencies of the versions that finished spreading since the last report."""
        self.cond = threading.Condition(threading.RLock())
        self.examples = examples if isinstance(examples, CountingStream) else CountingStream(examples)
        self.trained = TrainedDraws()
        self.in_training: list[Group] = []
        """Groups the learner took since its last publish and did not give back: trained by then."""
        self.registry = WorkerRegistry(run_token)
        self.relay_checker = RelayChecker(self.registry.broadcast_token, self._relay_verdict) if check_relays else None
        self.leases = LeaseBook(lease_timeout_s)
        self.ledger: PacingLedger[Example, Group] = PacingLedger(spec.staleness, groups_per_step)
        self.versions = VersionBook(planner, spec.staleness)
        self.finished = False
        self.trial_seats = trial_seats
        """Identities on trial admitted at once, at least (:data:`TRIAL_SEATS`, or the local workers)."""
        self.timeline_budget = RateLimiter(*TIMELINE_EVENTS)
        """Timeline events each worker may have drawn (:data:`TIMELINE_EVENTS`)."""
        self.long_polls = 0
        """Lease requests held open now (:mod:`~echo2.coordinator.work`: bounded)."""
        self._reaped_at = 0.0
        self.counters: Counter[str] = Counter()
        self.rejected = self.leases.rejected  # submissions refused, by code

    def _relay_verdict(self, worker_id: str, reachable: bool, why: str) -> None:
        with self.cond:
            self.registry.relay_checked(worker_id, reachable, why)

    @property
    def version(self) -> int:
        return self.ledger.version

    def _replan(self, reason: str) -> None:
        """Re-decide the active set after the fleet changed (call locked). A worker no longer at
        work (dead, gone, parked, quarantined) leaves the dissemination census: it generates
        nothing, so the figure does not wait for it, and a parked one counts again from its next
        load once at work, as in the simulator (a parked worker asking only when its held request
        times out is not timed by that). The versions that its leaving lets reach the whole fleet
        are timed at once."""
        self.fleet.replan(self.registry.records(), self.clock.train_s, self.clock.broadcast_s,
                          self.versions.census, reason=reason)
        now = time.time()
        for record in self.registry.records():
            if not record.at_work:
                self.versions.gone(record.worker_id, now)
        self._time_dissemination()

    def _time_dissemination(self) -> None:
        """Versions that now reached every live worker (:meth:`VersionBook.pop_disseminated`): on
        the timeline, into the run clock, and into the next report (call locked)."""
        done = self.versions.pop_disseminated()
        for reached in done:
            self.on_interval("broadcast", "disseminate", reached.published, reached.reached, reached.version)
        latencies = [reached.reached - reached.published for reached in done]
        self.clock.disseminated(latencies)
        self.disseminated += latencies

    def _expire(self, lease: Lease) -> None:
        lease.state = "expired"
        self.counters["leases_expired"] += 1
        self.ledger.release(lease.examples, front=True)
        self.cond.notify_all()

    def _drop_taken(self, groups: list[Group], requeue: bool, counter: str) -> None:
        """``groups`` left the learner's batch untrained (filtered, unauditable, or their worker
        quarantined): their slots free the window, their prompts ``requeue``d or used up (call locked)."""
        self.ledger.discard_taken([group.example for group in groups], requeue=requeue)
        for group in groups:
            self.trained.discard(group.example)
        self.counters["groups_trained"] -= len(groups)
        self.counters[counter] += len(groups)
        self.cond.notify_all()
