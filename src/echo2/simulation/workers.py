"""The workers' side of the simulation: the lease loop of ``rollout/worker.py``, fetches, preemptions.

Per protocol (as in the real worker):

* ``sync`` / ``pull``: before every lease the worker asks for the newest version (one round
  trip) and, when it is newer, fetches it (blocking) and loads it;
* ``async``: a background fetch starts when the worker hears of a newer version (from a lease
  reply, or at the latest from its next heartbeat) and fetches the newest one; the fetched
  version is swapped in between two leases; a ``refresh`` answer makes the worker wait for it.

Either way a lease's results go out in the background and the next request leaves with them: one
round trip per lease, not two; an async worker asks for its next lease when it starts generating
one, and generates it when that one is done (:mod:`echo2.rollout.lease_ahead`).

Fetches themselves, from the learner or along the relay plan: :mod:`echo2.simulation.fetching`.

Preemption (rate per running hour, exponential): a lease that ends within the notice is still
submitted and the worker then deregisters (echo2 workers finish the request in hand on
SIGTERM); otherwise the lease is lost and re-issued when the worker is declared dead (at once
when it was idle and had notice, else after the heartbeat timeout). A replacement boots for
``recovery_s`` (billed) and registers as a new, unmeasured worker (active on probation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from echo2.core.profiling import LeaseCycle
from echo2.simulation.fetching import Fetches
from echo2.simulation.fleet import SimLease, SimWorker
from echo2.simulation.state import SimState

if TYPE_CHECKING:
    from echo2.core.worker_protocol import AfterAnswer


class CoordinatorMoves(Protocol):
    """What the workers' side asks of the coordinator (:class:`echo2.simulation.engine.Simulation`)."""

    def lease_arrives(self, worker: SimWorker, epoch: int, version: int) -> None:
        """A lease request reaches the coordinator."""

    def expire(self, lease: SimLease, missed_deadline: bool = False) -> None:
        """The coordinator gives up on ``lease`` (its worker gone)."""

    def census(self, worker: SimWorker) -> None:
        """``worker``'s version, running or active state changed: the coordinator counts it again."""

    def request_replan(self, reason: str) -> None:
        """An active worker died: activation re-plans."""


class WorkerLoop:
    """Every worker's lease loop over the books, fetching through :class:`Fetches`, asking the
    coordinator's moves of ``coordinator``."""

    def __init__(self, state: SimState, coordinator: CoordinatorMoves) -> None:
        self.state, self.coordinator = state, coordinator
        self.fetches = Fetches(state, self.fetched)

    # ------------------------------------------------------------------ the lease loop
    def cycle(self, worker: SimWorker, head_start_s: float = 0.0) -> None:
        """Between two leases: refresh the weights as the protocol says, then ask for a lease.
        ``head_start_s``: how long ago the worker began (it submits in the background: its next
        request left with its submission, and arrives with it)."""
        if self.state.books.finished:
            return
        if worker.leaving:  # once the lease in hand is submitted (a lease asked ahead is handed back)
            if not any(lease.starts_at <= self.state.queue.now for lease in worker.leases):
                self._leave(worker)
            return
        worker.phase = "request"
        before = worker.protocol.before_lease()
        if before == "fetch_newest":
            self.state.queue.after(worker.rtt_s / 2 - head_start_s, self._version_check, worker, worker.epoch)
            return
        delay = -head_start_s
        if before == "swap_in" and (swapped := worker.protocol.swap_in()) is not None:
            self._load(worker, swapped)
            delay += worker.spec.load_s
        self.state.queue.after(delay + worker.rtt_s / 2, self.coordinator.lease_arrives, worker, worker.epoch,
                               worker.protocol.version)

    def _version_check(self, worker: SimWorker, epoch: int) -> None:
        """Sequential pull: the coordinator's answer to ``GET /v1/version``."""
        if epoch != worker.epoch:
            return
        if self.state.books.ledger.version > worker.protocol.version:
            worker.phase = "fetch"
            self.fetches.begin(worker, self.state.queue.now + worker.rtt_s / 2)
        else:
            self.state.queue.after(worker.rtt_s, self.coordinator.lease_arrives, worker, epoch, worker.protocol.version)

    def refreshed(self, worker: SimWorker, epoch: int, action: AfterAnswer) -> None:
        """The lease reply said ``refresh`` (the worker's weights are too old for the next slot), and
        the protocol ``action``: ask again, or wait for the staged version (unless one is staged)."""
        if epoch != worker.epoch:
            return
        if action == "wait_for_staged" and worker.protocol.staged is None:
            worker.phase = "wait_stage"
        else:
            self.cycle(worker)

    # ------------------------------------------------------------------ weights
    def heartbeat(self, worker: SimWorker, epoch: int) -> None:
        if epoch == worker.epoch:
            self.learn(worker, self.state.books.ledger.version, self.state.queue.now + worker.rtt_s / 2)

    def learn(self, worker: SimWorker, version: int, at: float) -> None:
        """The worker hears at ``at`` that ``version`` is out; an idle async fetcher starts on it
        (after one round trip to ask for the version's sources)."""
        if worker.protocol.heard(version):
            self.fetches.begin(worker, at + worker.rtt_s)

    def fetched(self, worker: SimWorker, epoch: int, version: int, begin: float) -> None:
        if epoch != worker.epoch:
            return
        now = self.state.queue.now
        if worker.worker_id in self.state.recorder.timeline_ids:
            self.state.recorder.interval(worker.worker_id, "fetch", begin, now, version)
        if worker.phase == "fetch":  # blocking: the pull protocols, and every (re)start
            worker.protocol.loaded(version)
            self._load(worker, version)
            worker.phase = "request"
            self.state.queue.after(worker.spec.load_s + worker.rtt_s / 2, self.coordinator.lease_arrives, worker, epoch,
                                   version)
            if worker.protocol.wants_fetch():  # async: a version published during the blocking fetch
                self.fetches.begin(worker, now + worker.rtt_s)
            return
        worker.protocol.fetch_ended(version)
        interval = self.state.scenario.recipe.coordinator.heartbeat_interval_s
        last_tick = now - (now - worker.heartbeat_phase) % interval
        worker.protocol.heard(self.state.version_at(last_tick - worker.rtt_s / 2))
        if worker.phase == "wait_stage":
            self.cycle(worker)
        if worker.protocol.wants_fetch():
            self.fetches.begin(worker, now + worker.rtt_s)

    def _load(self, worker: SimWorker, version: int) -> None:
        """The worker loaded ``version`` (its protocol state says so already): count it."""
        self.coordinator.census(worker)

    # ------------------------------------------------------------------ running and parked
    def run_worker(self, worker: SimWorker, holding: int | None = None) -> None:
        """The worker is up: billed, relaying, preemptible; it fetches the newest version first
        (blocking) unless it already holds ``holding``."""
        now = self.state.queue.now
        worker.running, worker.leaving = True, False
        self.state.running[worker.worker_id] = worker
        self.state.membership += 1
        self.bill(worker)
        rate = worker.spec.preemption_per_hour
        if rate > 0:
            self.state.queue.after(self.state.rng.expovariate(rate / 3600), self._preempt, worker, worker.epoch)
        worker.protocol.forget()
        if holding is not None:
            worker.protocol.loaded(holding)
            worker.held.append(holding)
            self.coordinator.census(worker)
            return
        worker.phase = "fetch"
        self.fetches.begin(worker, now + worker.rtt_s)

    def bill(self, worker: SimWorker) -> None:
        """Full price while active, the parked share while parked (a booting replacement is billed as
        the worker it replaces was)."""
        share = 1.0 if worker.active else self.state.scenario.activation.parked_price_fraction
        self.state.billing.start(worker.worker_id, worker.worker_class, share * worker.price_per_hour,
                                 self.state.queue.now,
                           worker.active)

    def stop_running(self, worker: SimWorker) -> None:
        """Void the worker's pending events and take it out of the plan and the version census."""
        worker.epoch += 1
        worker.running, worker.leases = False, []
        worker.protocol.forget()
        self.state.parked.pop(worker.worker_id, None)
        if self.state.running.pop(worker.worker_id, None) is not None:
            self.state.membership += 1
        self.fetches.drop(worker)
        self.coordinator.census(worker)

    def park(self, worker: SimWorker, epoch: int, version: int) -> None:
        """The coordinator holds a parked worker's lease request (it stays registered, keeps its
        weights current and relays) until activation picks it again."""
        worker.phase = "parked"
        self.state.parked[worker.worker_id] = (worker, epoch, version)
        self.bill(worker)
        self.coordinator.census(worker)

    def unpark(self, worker: SimWorker) -> None:
        _, epoch, version = self.state.parked.pop(worker.worker_id)
        self.bill(worker)
        self.coordinator.census(worker)
        self.coordinator.lease_arrives(worker, epoch, version)

    # ------------------------------------------------------------------ preemption
    def _preempt(self, worker: SimWorker, epoch: int) -> None:
        if epoch != worker.epoch or not worker.running or self.state.books.finished:
            return
        now, notice = self.state.queue.now, worker.spec.preemption_notice_s
        out = [lease for lease in worker.leases if lease.state == "active"]
        begun = [lease for lease in out if lease.starts_at <= now]
        if begun and begun[-1].ends_at - now <= notice:
            worker.leaving = True  # finishes and submits, then deregisters (see cycle)
            return
        graceful = notice > 0 and not out  # idle with notice: deregisters at once
        if graceful:
            self.state.books.counters.workers_left += 1
        else:
            self.state.books.counters.workers_dead += 1
        for lease in begun:
            self.state.recorder.waste("preempted", len(lease.slots) * self.state.books.group_size)
        detected = now if graceful else now + notice + self.state.scenario.recipe.coordinator.heartbeat_timeout_s
        self.stop_running(worker)
        worker.phase = "down"
        for lease in out:
            self.state.queue.at(detected, self.coordinator.expire, lease)
        self.state.queue.at(detected, self._declared_gone, worker, worker.epoch)
        self.state.queue.at(max(now + worker.spec.recovery_s, detected), self._registered, worker, worker.epoch)

    def _leave(self, worker: SimWorker) -> None:
        """Deregistered after finishing its lease under a preemption notice: a lease it had asked for
        ahead goes back to the window at once (the coordinator re-issues it first)."""
        self.state.books.counters.workers_left += 1
        handed_back = list(worker.leases)
        self.stop_running(worker)
        for lease in handed_back:  # once it is gone; the window it frees is answered at once, as live
            self.coordinator.expire(lease)
        worker.phase = "down"
        self._declared_gone(worker, worker.epoch)
        self.state.queue.after(worker.spec.recovery_s, self._registered, worker, worker.epoch)

    def _declared_gone(self, worker: SimWorker, epoch: int) -> None:
        """The coordinator re-plans when an active worker dies (a parked one leaves the set as it was)."""
        if epoch != worker.epoch or self.state.books.finished:
            return
        worker.alive = False
        if worker.active:
            self.coordinator.request_replan("death")

    def _registered(self, worker: SimWorker, epoch: int) -> None:
        """The replacement registers: a new worker, unmeasured, hence active on probation, and on
        trial for its lease size (:mod:`echo2.core.shares`). (The
        coordinator re-plans on a join too, but that cannot change the set until the newcomer is
        measured; the next periodic re-plan sees it.)"""
        if epoch != worker.epoch or self.state.books.finished:
            return
        worker.alive, worker.active, worker.throughput, worker.proven, worker.parked_at = True, True, None, False, None
        worker.groups_delivered, worker.unfulfilled, worker.parked_until = 0, 0, 0.0  # a new identity's record
        worker.cycle = LeaseCycle()
        self.run_worker(worker)
