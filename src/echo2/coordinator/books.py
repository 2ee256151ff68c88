"""The coordinator's books, one lock over them: the run's books (:class:`echo2.core.books.Books`:
the pacing ledger, the shares, the run clock, the census, the active leases, the counters — the
simulator keeps the same object, in its :class:`echo2.simulation.state.SimState`) and the
coordinator's own parts beside them: the registry and credentials, every lease by id, the
versions and their relay plans, activation and billing, scoring, the data cursor; and the few
moves more than one kind of request makes on them.

The requests are separate objects handed these books (composed, as the simulator's parts are
handed its state): the workers' comings and goings (:class:`~echo2.coordinator.membership.Membership`),
their leases and submissions (:class:`~echo2.coordinator.work.WorkDesk`) and the learner's
batches (:class:`~echo2.coordinator.batches.LearnerDesk`), wired in
:class:`echo2.coordinator.state.CoordinatorState`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from echo2.broadcast.topology import Planner, star_plan
from echo2.coordinator.cursor import CountingStream, TrainedDraws
from echo2.coordinator.fleet import Fleet
from echo2.coordinator.leases import LeaseBook
from echo2.coordinator.records import Lease, Limits, WorkerRecord
from echo2.coordinator.registry import WorkerRegistry
from echo2.coordinator.relay_check import RelayChecker
from echo2.coordinator.scoring import Scoring, TaskPrompts
from echo2.coordinator.sources import WorkSource
from echo2.coordinator.versions import VersionBook
from echo2.core.books import Books as RunBooks
from echo2.core.shares import SharePolicy
from echo2.exchange import Group
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import RunSpec
from echo2.tasks import Example

log = logging.getLogger("echo2")

Interval = Callable[[str, str, float, float, int], None]
"""Writes one interval of the run's timeline: who, what, start, end, version."""
@dataclass(frozen=True)
class Training:
    """What a training run's books pace: the task's endless, deterministic example stream (the
    data cursor: leased as :class:`~echo2.coordinator.scoring.TaskPrompts`, or opened group by group
    by an agent's episodes) and the groups one learner step takes. A training service has none:
    its clients train on data of their own."""

    examples: Iterator[Example]
    groups_per_step: int


class CoordinatorBooks:
    """The books of one run, one lock over them (``cond``: every change is made holding it).
    ``training``: what the staleness window paces (None: a training service, whose fleet does
    sampling requests only); ``prompts``: the task's prompts, leased and scored (None: no prompt is
    leased); ``check_relays``: peers go to a relay only once it answered as its worker (:mod:`.relay_check`)."""

    def __init__(
        self,
        spec: RunSpec,
        limits: Limits,
        *,
        training: Training | None,
        run_token: str,
        lease_timeout_s: float,
        prompts: TaskPrompts | None = None,
        on_interval: Interval = lambda who, kind, start, end, version: None,
        planner: Planner = star_plan,
        fleet: Fleet | None = None,
        window_share: float = 0.5,
        check_relays: bool = False,
        replan_every: int = 1,
    ) -> None:
        if prompts is not None and training is None:
            raise ValueError("task prompts are leased by a training run's staleness window: give its training")
        self.spec, self.limits = spec, limits
        self.sources: dict[str, WorkSource] = {}
        """The run's kinds of sampling work by name (:mod:`~echo2.coordinator.sources`): a training
        service's clients, an agent run's calls; where a sampling lease's results go once checked
        (added by :meth:`~echo2.coordinator.state.CoordinatorState.add_source`)."""
        self.scoring = Scoring(prompts)  # rewards and environment answers: the coordinator's own
        # a service's window paces no step: one group a "step" keeps its ledger well-formed, and empty
        groups_per_step = training.groups_per_step if training is not None else 1
        self.staleness, self.groups_per_step = spec.staleness, groups_per_step
        self.on_interval = on_interval
        self.fleet = fleet or Fleet(ActivationPolicy(enabled=False, rollouts_per_step=1, staleness=spec.staleness))
        self.disseminated: list[float] = []
        """Dissemination latencies of the versions that finished spreading since the last report."""
        self.cond = threading.Condition(threading.RLock())
        self.examples = CountingStream(training.examples if training is not None else iter(()))
        self.trained = TrainedDraws()
        self.registry = WorkerRegistry(run_token)
        self.books: RunBooks[WorkerRecord, Group] = RunBooks(
            self.registry.workers, Group.workers, staleness=spec.staleness,
            groups_per_step=groups_per_step, group_size=limits.group_size,
            shares=SharePolicy(groups_per_lease=spec.groups_per_lease, window_share=window_share,
                               grows_with_delivery=spec.size_leases_to_device),
            lease_timeout_s=lease_timeout_s, replan_every=replan_every, lease_ids=lambda: secrets.token_hex(8),
            on_parked=lambda record, seconds, why: log.warning("worker %s %s: parked for %.0f s", record.name, why,
                                                               seconds),
            prompts=prompts is not None)
        """The run's books (:class:`echo2.core.books.Books`, the simulator's too), in ``time.monotonic()``
        seconds; a slot carries the task's example, a group is a :class:`Group`."""
        self.relay_checker = RelayChecker(self.registry.broadcast_token, self.relay_verdict) if check_relays else None
        self.leases = LeaseBook(self.books.rejected)
        self.versions = VersionBook(planner, spec.staleness)

    def relay_verdict(self, worker_id: str, reachable: bool, why: str) -> None:
        with self.cond:
            self.registry.relay_checked(worker_id, reachable, why)

    def recheck_relay(self, relay: WorkerRecord, reporter: str) -> None:
        """``reporter`` found ``relay`` silent (call locked): the coordinator asks it for a chunk of
        the newest version it says it holds (the newest published where it said none), from its own
        host, within the stall budget, and takes it out of the plan if it does not send it here
        either (:meth:`~.relay_check.RelayChecker.recheck`). A relay silent to one child only (a
        cut link) keeps its place; that child skips it a while."""
        if self.relay_checker is None or relay.relay_url is None or relay.relay_demoted(time.monotonic()):
            return
        version = relay.loaded_version if relay.loaded_version >= 0 else self.version
        self.relay_checker.recheck(relay.worker_id, relay.relay_url, version, self.spec.broadcast_stall_s,
                                   lambda worker_id, answered, why: self._silence_verdict(worker_id, answered,
                                                                                          f"{why}; {reporter}"))

    def _silence_verdict(self, worker_id: str, answered: bool, why: str) -> None:
        with self.cond:
            relay = self.registry.workers.get(worker_id)
            if relay is None:
                return
            if answered:
                log.info("relay of %s answered the coordinator (%s): kept", relay.name, why)
            else:
                self.registry.silence_relay(relay, f"silent to its child and to the coordinator ({why})")

    @property
    def version(self) -> int:
        return self.books.version

    @property
    def finished(self) -> bool:
        return self.books.finished

    def replan(self, reason: str) -> None:
        """Re-decide the active set after the fleet changed (call locked). A worker no longer at
        work (dead, gone, parked, quarantined) leaves the dissemination census: it generates
        nothing, so the figure does not wait for it, and a parked one counts again from its next
        load once at work, as in the simulator (a parked worker asking only when its held request
        times out is not timed by that). The versions that its leaving lets reach the whole fleet
        are timed at once."""
        self.fleet.replan(self.registry.records(), self.books.clock, self.books.census, reason=reason)
        now = time.time()
        for record in self.registry.records():
            if not record.at_work:
                self.census(record, None, now)
        self.time_dissemination()

    def census(self, record: WorkerRecord, version: int | None, at: float) -> None:
        """``record`` holds ``version`` (None: none) in the books' census from ``at`` (wall time);
        each version that thereby reached the fleet goes on the timeline (call locked)."""
        for reached in self.books.hold(record, version, at):
            self.on_interval("broadcast", "disseminate", reached.published, reached.reached, reached.version)

    def time_dissemination(self) -> None:
        """The disseminations completed since the last call: into the run clock and the next report (call locked)."""
        self.disseminated += self.books.time_dissemination()

    def expire(self, lease: Lease, missed_deadline: bool = False) -> None:
        self.books.expire(lease, time.monotonic(), missed_deadline)
        self.cond.notify_all()

    def drop_taken(self, groups: list[Group], requeue: bool) -> None:
        """``groups`` left the learner's batch untrained (filtered, unauditable, or their worker
        quarantined): their slots free the window, their prompts ``requeue``d or used up (call
        locked; the caller counts why)."""
        self.books.ledger.discard_taken([group.example for group in groups], requeue=requeue)
        for group in groups:
            self.trained.discard(group.example)
        self.books.counters.groups_trained -= len(groups)
        self.cond.notify_all()
