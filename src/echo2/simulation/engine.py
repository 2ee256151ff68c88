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

from echo2.core.leasing import LeaseAnswer, answer_lease
from echo2.core.shares import delivered, dropped_stale, group_seconds, missed
from echo2.planning.activation_rule import apply, decide, view
from echo2.planning.broadcast_time import broadcast_seconds
from echo2.simulation.fleet import Lease, SimWorker, lognormal
from echo2.simulation.results import SimResult
from echo2.simulation.scenario import Scenario
from echo2.simulation.books import SimBooks
from echo2.simulation.workers import WorkerLoop
from echo2.units import MIB


class SimulationStalled(RuntimeError):
    """Nothing is left to happen but the learner still waits (e.g. no worker can ever serve it)."""


class Simulation:
    """The learner and the coordinator's side of a simulated run: an event clock (the books' queue)
    driving the books (:class:`SimBooks`), the workers' lease loop (:class:`WorkerLoop`, which
    fetches through :class:`~echo2.simulation.fetching.Fetches`) and the same cores the live roles
    call; the moves the workers ask of the coordinator are this class's public methods."""

    def __init__(self, scenario: Scenario, timeline_workers: int = 12) -> None:
        self.books = SimBooks(scenario, timeline_workers)
        self.lease_loop = WorkerLoop(self.books, self)

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        started = time.perf_counter()
        self._initial_plan()
        for worker in self.books.workers:
            self.lease_loop.run_worker(worker, holding=0)
        for worker in list(self.books.running.values()):
            self.lease_loop.cycle(worker)
        self.books.queue.run(until=lambda: self.books.finished)
        if not self.books.finished:
            raise SimulationStalled(f"simulation stalled at step {self.books.step} of "
                                    f"{self.books.scenario.recipe.run.steps} "
                                    f"(t = {self.books.queue.now:.0f}s, {len(self.books.running)} workers running, "
                                    f"{len(self.books.ledger)} groups buffered)")
        return self.books.recorder.result(self.books, time.perf_counter() - started)

    def _initial_plan(self) -> None:
        """The provisioning rule on declared throughputs (an ``echo2 plan``), iterated with the
        dissemination estimate of the chosen set (``planning/provision.py`` does the same)."""
        for worker in self.books.workers:
            worker.alive, worker.throughput = True, worker.declared_throughput
        broadcast = self.books.scenario.broadcast
        for _ in range(5):
            uploads = [w.upload for w in self.books.workers if w.active or self.books.clock.broadcast_s is None]
            estimate = broadcast_seconds(self.books.payload, self.books.learner_upload, uploads, broadcast.mode,
                                         broadcast.chunk_mib * MIB)
            if estimate == self.books.clock.broadcast_s:
                break
            self.books.clock.broadcast_s = estimate
            self._decide()
        self.books.replanned_at = 0

    # ------------------------------------------------------------------ learner
    def _learner_try(self) -> None:
        if self.books.learner_busy or self.books.finished:
            return
        stale_before = self.books.ledger.dropped_stale
        batch = self.books.ledger.take(self.books.step, self.books.ledger.groups_per_step, self._dropped_stale)
        if dropped := self.books.ledger.dropped_stale - stale_before:
            self.books.recorder.waste("stale", dropped * self.books.group_size)
            self._open_window()
        if batch is None:
            return
        versions = [version for version, _ in batch]
        self.books.counters["groups_trained"] += len(versions)
        now = self.books.queue.now
        if self.books.step == 0:
            self.books.startup_s = now - self.books.wait_since
        else:
            self.books.idle_s += now - self.books.wait_since
        self.books.learner_busy = True
        self.books.clock.batch_taken(now)
        step_s = lognormal(self.books.rng, self.books.train_s, self.books.scenario.learner.step_cv)
        self.books.in_training = batch
        self.books.queue.after(step_s, self._learner_done, batch, now)

    def _dropped_stale(self, group: tuple[int, SimWorker]) -> None:
        """A group too old to train: its worker's miss, if it is on trial or slowed (as the coordinator counts it)."""
        worker = group[1]
        covered = any(w is not worker and w.active and w.proven for w in self.books.running.values())
        dropped_stale(self.books.shares, worker, covered, self.books.queue.now,
                      self.books.scenario.recipe.coordinator.lease_timeout_s)

    def _learner_done(self, batch: list[tuple[int, SimWorker]], started: float) -> None:
        """The step trained ``batch`` (each group's version and worker): its workers delivered
        (:func:`echo2.core.shares.delivered`, as the coordinator counts them at the publish)."""
        now = self.books.queue.now
        for _, worker in batch:
            delivered(worker)
        self.books.in_training = []
        versions = [version for version, _ in batch]
        self.books.busy_s += now - started
        self.books.learner_busy = False
        self.books.step += 1
        replan_due = self.books.clock.published(self.books.step, now)
        self.books.ledger.version = self.books.step
        self.books.census.publish(self.books.step, now)
        self.books.published_times.append(now)
        self._publish(self.books.step)
        self.books.clock.disseminated(self.books.recorder.step(self.books, versions, started))
        if self.books.step >= self.books.scenario.recipe.run.steps:
            self._finish()
            return
        self.books.wait_since = now
        if replan_due or self.books.replan_pending:
            self._replan("periodic")
        self._open_window()
        self._learner_try()

    def _finish(self) -> None:
        self.books.finished = True
        for worker in self.books.workers:
            self.books.billing.stop(worker.worker_id, worker.worker_class, self.books.queue.now)

    # ------------------------------------------------------------------ versions
    def _publish(self, version: int) -> None:
        """Async workers hear of the version at their next heartbeat (the others ask before a lease)."""
        if self.books.protocol != "async":
            return
        now, interval = self.books.queue.now, self.books.scenario.recipe.coordinator.heartbeat_interval_s
        for worker in self.books.running.values():
            if not worker.protocol.fetching:
                tick = now + (worker.heartbeat_phase - now) % interval
                self.books.queue.at(tick + worker.rtt_s / 2, self.lease_loop.heartbeat, worker, worker.epoch)

    def census(self, worker: SimWorker) -> None:
        """Count ``worker``'s version (:class:`~echo2.core.dissemination.DisseminationCensus`: running,
        active and unparked workers count); record each version that reached the fleet."""
        counted = (worker.running and worker.active and worker.worker_id not in self.books.parked
                   and worker.protocol.version >= 0)
        version = worker.protocol.version if counted else None
        for reached in self.books.census.hold(worker.worker_id, version, self.books.queue.now):
            self.books.recorder.disseminated(reached.version, reached.published, reached.reached)

    # ------------------------------------------------------------------ coordinator: leases
    def lease_arrives(self, worker: SimWorker, epoch: int, version: int) -> None:
        if epoch == worker.epoch:
            self._respond(worker, epoch, version, self._lease_answer(worker, version))

    def _lease_answer(self, worker: SimWorker, version: int) -> LeaseAnswer:
        """:func:`echo2.core.leasing.answer_lease` over the simulation's books, now."""
        held = sum(len(lease.slots) for lease in worker.leases if lease.state == "out")
        others = [w for w in self.books.running.values() if w is not worker and w.active]
        proven = [w for w in others if w.proven]
        untrained = (self.books.ledger.buffered(lambda group: group[1] is worker)
                     + sum(w is worker for _, w in self.books.in_training)
                     if not worker.proven and proven else 0)
        group_s = group_seconds(self.books.group_size, worker.throughput, [w.throughput for w in proven if w.throughput])
        return answer_lease(self.books.ledger, self.books.shares, worker, worker_version=version,
                            requested=self.books.groups_per_lease,
                            held=held, active=worker.active, others_live=bool(others), now=self.books.queue.now,
                            lease_timeout_s=self.books.scenario.recipe.coordinator.lease_timeout_s, group_s=group_s,
                            others_proven=bool(proven), finished=self.books.finished, untrained=untrained)

    def _respond(self, worker: SimWorker, epoch: int, version: int, answer: LeaseAnswer) -> None:
        """Carry out the answer; the ones that change with time are held as the coordinator holds them."""
        if answer.status == "stop":
            return
        worker.cycle.answered(answer.status, self.books.queue.now)
        if answer.status == "parked" and not worker.active:
            self.lease_loop.park(worker, epoch, version)  # until activation picks it again
        elif answer.status == "parked":  # its leases kept expiring: held back until its parking ends
            self.books.queue.at(worker.parked_until, self.lease_arrives, worker, epoch, version)
        elif answer.status == "wait":
            worker.phase = "wait_window"
            self.books.waiting.append((worker, epoch, version))
        else:
            self._answer(worker, answer, version)

    def _answer(self, worker: SimWorker, answer: LeaseAnswer, version: int) -> None:
        """The reply reaches the worker; a lease asked for ahead is generated after the one in hand."""
        now = self.books.queue.now
        reply = now + worker.rtt_s / 2
        action = worker.protocol.answered(answer.status, self.books.ledger.version, worker.rtt_s)
        self.lease_loop.learn(worker, self.books.ledger.version, reply)
        if answer.status == "refresh":
            self.books.queue.at(max(reply, worker.busy_until), self.lease_loop.refreshed, worker, worker.epoch, action)
            return
        slots = list(self.books.ledger.grant(version, answer.size, lambda: None, answer.lent))
        self.books.counters["leases_issued"] += 1
        generate = lognormal(self.books.rng, len(slots) * self.books.group_size / worker.rate,
                             worker.spec.throughput_cv)
        start = max(reply, worker.busy_until)
        worker.busy_until = start + generate
        lease = Lease(worker, version, slots, granted_at=now, starts_at=start,
                      ends_at=start + generate + worker.rtt_s / 2)
        worker.leases.append(lease)
        worker.phase = "generate"
        self.books.queue.at(start, self._generating, worker, worker.epoch, lease)
        self.books.queue.at(start + generate, self._generated, worker, worker.epoch, generate)
        self.books.queue.at(lease.ends_at, self._submitted, worker, worker.epoch, lease)
        if lease.ends_at - now > answer.deadline_s:
            self.books.queue.after(answer.deadline_s, self.expire, lease)

    def _generating(self, worker: SimWorker, epoch: int, lease: Lease) -> None:
        """The worker starts on ``lease`` (unless it is leaving: it finished the lease in hand); an
        async one whose round trip is long against this lease asks for its next lease now, unless
        a fetched version waits to be swapped in (:mod:`echo2.rollout.lease_ahead`)."""
        if epoch != worker.epoch or worker.leaving:
            return
        self.books.recorder.interval(worker.worker_id, "generate", lease.starts_at, lease.ends_at - worker.rtt_s / 2,
                               lease.version)
        if worker.protocol.ask_ahead():
            self.books.queue.after(worker.rtt_s / 2, self.lease_arrives, worker, epoch, worker.protocol.version)

    def _generated(self, worker: SimWorker, epoch: int, seconds: float) -> None:
        if epoch == worker.epoch:
            worker.protocol.generated(seconds)

    def _submitted(self, worker: SimWorker, epoch: int, lease: Lease) -> None:
        if epoch != worker.epoch:
            return
        worker.leases.remove(lease)
        now = self.books.queue.now
        rollouts = len(lease.slots) * self.books.group_size
        self.books.recorder.generated += rollouts
        if lease.state == "expired":  # ran past its deadline: the coordinator refuses it
            self.books.counters["groups_rejected_expired_lease"] += len(lease.slots)
            self.books.recorder.waste("late", rollouts)
        else:
            lease.state = "done"  # delivered once a group of it is trained (_learner_done)
            for slot in lease.slots:
                self.books.ledger.admit(slot, lease.version, (lease.version, worker))
            self.books.counters["leases_completed"] += 1
            self.books.counters["groups_accepted"] += len(lease.slots)
            worker.throughput = worker.cycle.submitted(now, lease.granted_at, rollouts, worker.throughput)
        if worker.leaving or not (worker.leases or worker.protocol.asking_ahead):
            # it began its next cycle when it sent these results
            self.lease_loop.cycle(worker, head_start_s=worker.rtt_s / 2)
        self._open_window()  # a request held back by this worker's share of the window
        self._learner_try()

    def expire(self, lease: Lease) -> None:
        if lease.state != "out":
            return
        lease.state = "expired"
        self.books.ledger.release(lease.slots)
        self.books.counters["leases_expired"] += 1
        missed(self.books.shares, lease.worker, self.books.queue.now,
               self.books.scenario.recipe.coordinator.lease_timeout_s)
        self._open_window()

    def _open_window(self) -> None:
        """Answer the held lease requests that the window now admits (in arrival order)."""
        while self.books.waiting:
            worker, epoch, version = self.books.waiting[0]
            if epoch != worker.epoch or worker.phase != "wait_window":
                self.books.waiting.popleft()
                continue
            answer = self._lease_answer(worker, version)
            if answer.status == "wait":
                return
            self.books.waiting.popleft()
            self._respond(worker, epoch, version, answer)

    # ------------------------------------------------------------------ coordinator: activation
    def _replan(self, reason: str) -> None:
        """Re-decide the active set with the coordinator's rule: answer the held requests of the
        workers it activates; the ones it parks get ``parked`` at their next request (a request
        waiting for the window is parked at once, as the coordinator's long-poll does)."""
        if not self.books.scenario.activation.enabled:
            return
        self.books.replanned_at, self.books.replan_pending = self.books.step, False
        self._decide()
        for worker in self.books.workers:
            if worker.active and worker.worker_id in self.books.parked:
                self.lease_loop.unpark(worker)
            elif not worker.active and worker.running:
                self.lease_loop.bill(worker)
                self.census(worker)
        self._open_window()

    def _decide(self) -> None:
        """Apply the provisioning rule to the live workers."""
        live = [w for w in self.books.workers if w.alive]
        census, now = self.books.census, self.books.queue.now
        decision = decide(self.books.activation, [view(w, census.arrival_s, now) for w in live],
                          self.books.clock.train_s, self.books.clock.broadcast_s)
        apply(decision, live, census.forget, now)

    def request_replan(self, reason: str) -> None:
        """On an active worker's death: at once, unless a re-plan already ran at this step (then at its end)."""
        if self.books.replanned_at == self.books.step:
            self.books.replan_pending = True
        else:
            self._replan(reason)


def simulate(scenario: Scenario, timeline_workers: int = 12) -> SimResult:
    """Run ``scenario`` to its last learner step (raises :class:`SimulationStalled` if it cannot get there)."""
    return Simulation(scenario, timeline_workers).run()

