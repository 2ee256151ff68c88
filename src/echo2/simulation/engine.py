"""A run, simulated: the learner, the coordinator's books, the relay plan, and every worker's loop.

The learner and the coordinator side (this module) follow ``learner/loop.py`` and
``coordinator/state.py``: the learner takes the ``B`` oldest fresh groups from the same pacing
ledger the coordinator keeps (:class:`echo2.core.pacing.PacingLedger`), trains for ``T_train``
(jittered), publishes the next version, records the step; a lease request is answered by the
coordinator's own rule (:func:`echo2.core.leasing.answer_lease`): granted, ``refresh``, or held
(long-poll) while the window is full or the worker parked; a lease lost with its worker expires
when the worker is declared dead. Workers fetch each version along the plan the coordinator would
make (:mod:`echo2.simulation.fetching`). Cost-aware activation is the coordinator's own rule (:mod:`echo2.planning.activation_rule`: profiled
throughput, provisioning rule, min-cost set), re-planned every ``replan_every`` steps and when an
active worker dies. The workers' side (protocols, fetches, preemptions) is
:mod:`echo2.simulation.workers`.

Simplifications, all documented in ``docs/simulation.md``: a lease long-poll never times out; a
worker's uplink does not slow its generation; the coordinator re-plans at most once per learner
step besides the periodic re-plan.
"""

from __future__ import annotations

import time

from echo2.core.leasing import LeaseAnswer
from echo2.core.sample_queue import SampleWork
from echo2.planning.activation_rule import replan
from echo2.planning.broadcast_time import broadcast_seconds
from echo2.simulation.fleet import SimGroup, SimLease, SimWorker, lognormal
from echo2.simulation.results import SimResult
from echo2.simulation.scenario import Scenario
from echo2.simulation.state import SimState
from echo2.simulation.workers import WorkerLoop
from echo2.units import MIB


class SimulationStalled(RuntimeError):
    """Nothing is left to happen but the learner still waits (e.g. no worker can ever serve it)."""


class Simulation:
    """The learner and the coordinator's side of a simulated run: an event clock (the books' queue)
    driving the books (:class:`SimState`), the workers' lease loop (:class:`WorkerLoop`, which
    fetches through :class:`~echo2.simulation.fetching.Fetches`) and the same cores the live roles
    call; the moves the workers ask of the coordinator are this class's public methods."""

    def __init__(self, scenario: Scenario, timeline_workers: int = 12) -> None:
        self.state = SimState(scenario, timeline_workers)
        self.lease_loop = WorkerLoop(self.state, self)

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        started = time.perf_counter()
        self._initial_plan()
        for worker in self.state.workers:
            self.lease_loop.run_worker(worker, holding=0)
        for worker in list(self.state.running.values()):
            self.lease_loop.cycle(worker)
        self.state.queue.run(until=lambda: self.state.books.finished)
        if not self.state.books.finished:
            raise SimulationStalled(f"simulation stalled at step {self.state.step} of "
                                    f"{self.state.scenario.recipe.run.steps} "
                                    f"(t = {self.state.queue.now:.0f}s, {len(self.state.running)} workers running, "
                                    f"{len(self.state.books.ledger)} groups buffered)")
        return self.state.recorder.result(self.state, time.perf_counter() - started)

    def _initial_plan(self) -> None:
        """The provisioning rule on declared throughputs (an ``echo2 plan``), iterated with the
        dissemination estimate of the chosen set (``planning/provision.py`` does the same)."""
        for worker in self.state.workers:
            worker.alive, worker.throughput = True, worker.declared_throughput
        broadcast = self.state.scenario.broadcast
        for _ in range(5):
            uploads = [w.upload for w in self.state.workers if w.active or self.state.books.clock.broadcast_s is None]
            estimate = broadcast_seconds(self.state.payload, self.state.learner_upload, uploads, broadcast.mode,
                                         broadcast.chunk_mib * MIB)
            if estimate == self.state.books.clock.broadcast_s:
                break
            self.state.books.clock.broadcast_s = estimate
            self._decide()
        self.state.replanned_at = 0

    # ------------------------------------------------------------------ learner
    def _learner_try(self) -> None:
        if self.state.learner_busy or self.state.books.finished:
            return
        books, now = self.state.books, self.state.queue.now
        stale_before = books.ledger.dropped_stale
        batch = books.take(self.state.step, books.ledger.groups_per_step, now)
        if dropped := books.ledger.dropped_stale - stale_before:
            self.state.recorder.waste("stale", dropped * books.group_size)
            self._open_window()
        if batch is None:
            return
        if self.state.step == 0:
            self.state.startup_s = now - self.state.wait_since
        else:
            self.state.idle_s += now - self.state.wait_since
        self.state.learner_busy = True
        step_s = lognormal(self.state.rng, self.state.train_s, self.state.scenario.learner.step_cv)
        self.state.queue.after(step_s, self._learner_done, batch, now)

    def _learner_done(self, batch: list[SimGroup], started: float) -> None:
        """The step trained ``batch`` (each group's version and worker): the books publish its
        version, its workers delivered (as the coordinator counts them at the publish)."""
        now = self.state.queue.now
        versions = [version for version, _ in batch]
        self.state.busy_s += now - started
        self.state.learner_busy = False
        self.state.step += 1
        replan_due = self.state.books.published(self.state.step, now, now)
        self.state.published_times.append(now)
        self._publish(self.state.step)
        self.state.recorder.step(self.state, versions, started, self.state.books.time_dissemination())
        if self.state.step >= self.state.scenario.recipe.run.steps:
            self._finish()
            return
        self.state.wait_since = now
        if replan_due or self.state.replan_pending:
            self._replan("periodic")
        self._open_window()
        self._learner_try()

    def _finish(self) -> None:
        self.state.books.finished = True
        for worker in self.state.workers:
            self.state.billing.stop(worker.worker_id, worker.worker_class, self.state.queue.now)

    # ------------------------------------------------------------------ versions
    def _publish(self, version: int) -> None:
        """Async workers hear of the version at their next heartbeat (the others ask before a lease)."""
        if self.state.protocol != "async":
            return
        now, interval = self.state.queue.now, self.state.scenario.recipe.coordinator.heartbeat_interval_s
        for worker in self.state.running.values():
            if not worker.protocol.fetching:
                tick = now + (worker.heartbeat_phase - now) % interval
                self.state.queue.at(tick + worker.rtt_s / 2, self.lease_loop.heartbeat, worker, worker.epoch)

    def census(self, worker: SimWorker) -> None:
        """Count ``worker``'s version in the books' census (:meth:`echo2.core.books.Books.hold`: a
        worker at work counts); record each version that reached the fleet."""
        for reached in self.state.books.hold(worker, worker.protocol.version, self.state.queue.now):
            self.state.recorder.disseminated(reached.version, reached.published, reached.reached)

    # ------------------------------------------------------------------ coordinator: leases
    def lease_arrives(self, worker: SimWorker, epoch: int, version: int) -> None:
        if epoch == worker.epoch:
            self._respond(worker, epoch, version, self._lease_answer(worker, version))

    def _lease_answer(self, worker: SimWorker, version: int) -> LeaseAnswer:
        """The books' answer to ``worker`` asking at ``version`` for what a live worker asks, now."""
        return self.state.books.answer(worker, worker_version=version, requested=self.state.groups_per_lease,
                                       now=self.state.queue.now)

    def _respond(self, worker: SimWorker, epoch: int, version: int, answer: LeaseAnswer) -> None:
        """Carry out the answer; the ones that change with time are held as the coordinator holds them."""
        if answer.status == "stop":
            return
        worker.cycle.answered(answer.status, self.state.queue.now)
        if answer.status == "parked" and not worker.active:
            self.lease_loop.park(worker, epoch, version)  # until activation picks it again
        elif answer.status == "parked":  # its leases kept expiring: held back until its parking ends
            self.state.queue.at(worker.parked_until, self.lease_arrives, worker, epoch, version)
        elif answer.status == "wait":
            worker.phase = "wait_window"
            self.state.waiting.append((worker, epoch, version))
        else:
            self._answer(worker, answer, version)

    def _answer(self, worker: SimWorker, answer: LeaseAnswer, version: int) -> None:
        """The reply reaches the worker; a lease asked for ahead is generated after the one in hand."""
        now = self.state.queue.now
        reply = now + worker.rtt_s / 2
        action = worker.protocol.answered(answer.status, self.state.books.ledger.version, worker.rtt_s)
        self.lease_loop.learn(worker, self.state.books.ledger.version, reply)
        if answer.status == "refresh":
            self.state.queue.at(max(reply, worker.busy_until), self.lease_loop.refreshed, worker, worker.epoch, action)
            return
        lease = self.state.books.grant(worker, version, answer, now, lambda: None, make=SimLease)
        generate = lognormal(self.state.rng, worker.curve.drain_s(self._lease_lengths(lease)), worker.spec.throughput_cv)
        start = max(reply, worker.busy_until)
        worker.busy_until = start + generate
        lease.starts_at, lease.ends_at = start, start + generate + worker.rtt_s / 2
        worker.leases.append(lease)
        worker.phase = "generate"
        self.state.queue.at(start, self._generating, worker, worker.epoch, lease)
        self.state.queue.at(start + generate, self._generated, worker, worker.epoch, generate)
        self.state.queue.at(lease.ends_at, self._submitted, worker, worker.epoch, lease)
        if lease.ends_at - now > answer.deadline_s:
            self.state.queue.after(answer.deadline_s, self._overdue, lease)

    def _lease_lengths(self, lease: SimLease) -> list[float]:
        """The lease's responses, tokens: each group's (or sampling request's rows) drawn together
        (their lengths correlate). A lease is one batch to the worker's engine and is submitted
        whole, when its longest is done."""
        return [length for size in self._rows(lease) for length in self.state.lengths.group(self.state.lengths_rng, size)]

    def _rows(self, lease: SimLease) -> list[int]:
        """Completions of each of the lease's slots: a group's ``group_size``, a sampling request's own rows."""
        if lease.kind == "sample":
            return [work.rows for work in lease.slots.values()]
        return [self.state.books.group_size] * len(lease.slots)

    def queue_samples(self, works: list[SampleWork]) -> None:
        """Sampling requests for the fleet (a training service's clients', an agent's calls), queued
        on the books as the coordinator queues them (:meth:`echo2.coordinator.state.CoordinatorState.queue_samples`);
        a worker held back may take them now."""
        for work in works:
            self.state.books.samples.add(work)
        self._open_window()

    def _generating(self, worker: SimWorker, epoch: int, lease: SimLease) -> None:
        """The worker starts on ``lease`` (unless it is leaving: it finished the lease in hand); an
        async one whose round trip is long against this lease asks for its next lease now, unless
        a fetched version waits to be swapped in (:mod:`echo2.rollout.lease_ahead`)."""
        if epoch != worker.epoch or worker.leaving:
            return
        self.state.recorder.interval(worker.worker_id, "generate", lease.starts_at, lease.ends_at - worker.rtt_s / 2,
                               lease.version)
        if worker.protocol.ask_ahead():
            self.state.queue.after(worker.rtt_s / 2, self.lease_arrives, worker, epoch, worker.protocol.version)

    def _generated(self, worker: SimWorker, epoch: int, seconds: float) -> None:
        if epoch == worker.epoch:
            worker.protocol.generated(seconds)

    def _submitted(self, worker: SimWorker, epoch: int, lease: SimLease) -> None:
        if epoch != worker.epoch:
            return
        worker.leases.remove(lease)
        now = self.state.queue.now
        rollouts = sum(self._rows(lease))
        self.state.recorder.generated += rollouts
        if lease.state == "expired":  # ran past its deadline: the coordinator refuses it
            self.state.books.counters.groups_rejected_expired_lease += len(lease.slots)
            self.state.recorder.waste("late", rollouts)
        else:
            self.state.books.submitted(lease, [(slot, (lease.version, worker)) for slot in lease.slots], rollouts, now)
        if worker.leaving or not (worker.leases or worker.protocol.asking_ahead):
            # it began its next cycle when it sent these results
            self.lease_loop.cycle(worker, head_start_s=worker.rtt_s / 2)
        self._open_window()  # a request held back by this worker's share of the window
        self._learner_try()

    def _overdue(self, lease: SimLease) -> None:
        """``lease``'s deadline passed: its worker's miss, if it is still out."""
        self.expire(lease, missed_deadline=True)

    def expire(self, lease: SimLease, missed_deadline: bool = False) -> None:
        self.state.books.expire(lease, self.state.queue.now, missed_deadline)
        self._open_window()

    def _open_window(self) -> None:
        """Answer the held lease requests that the window now admits (in arrival order)."""
        while self.state.waiting:
            worker, epoch, version = self.state.waiting[0]
            if epoch != worker.epoch or worker.phase != "wait_window":
                self.state.waiting.popleft()
                continue
            answer = self._lease_answer(worker, version)
            if answer.status == "wait":
                return
            self.state.waiting.popleft()
            self._respond(worker, epoch, version, answer)

    # ------------------------------------------------------------------ coordinator: activation
    def _replan(self, reason: str) -> None:
        """Re-decide the active set with the coordinator's rule: answer the held requests of the
        workers it activates; the ones it parks get ``parked`` at their next request (a request
        waiting for the window is parked at once, as the coordinator's long-poll does)."""
        if not self.state.scenario.activation.enabled:
            return
        self.state.replanned_at, self.state.replan_pending = self.state.step, False
        self._decide()
        for worker in self.state.workers:
            if worker.active and worker.worker_id in self.state.parked:
                self.lease_loop.unpark(worker)
            elif not worker.active and worker.running:
                self.lease_loop.bill(worker)
                self.census(worker)
        self._open_window()

    def _decide(self) -> None:
        """Apply the provisioning rule to the live workers."""
        replan(self.state.activation, [w for w in self.state.workers if w.alive], self.state.books.clock,
               self.state.books.census, self.state.queue.now)

    def request_replan(self, reason: str) -> None:
        """On an active worker's death: at once, unless a re-plan already ran at this step (then at its end)."""
        if self.state.replanned_at == self.state.step:
            self.state.replan_pending = True
        else:
            self._replan(reason)


def simulate(scenario: Scenario, timeline_workers: int = 12) -> SimResult:
    """Run ``scenario`` to its last learner step (raises :class:`SimulationStalled` if it cannot get there)."""
    return Simulation(scenario, timeline_workers).run()

