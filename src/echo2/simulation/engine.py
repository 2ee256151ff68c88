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
from echo2.core.shares import delivered, missed
from echo2.planning.activation_rule import WorkerView, busy_seconds, decide, profile
from echo2.planning.broadcast_time import broadcast_seconds
from echo2.simulation.fleet import Lease, SimWorker, lognormal
from echo2.simulation.results import SimResult
from echo2.simulation.scenario import Scenario
from echo2.simulation.workers import WorkerLoop
from echo2.units import MIB


class SimulationStalled(RuntimeError):
    """Nothing is left to happen but the learner still waits (e.g. no worker can ever serve it)."""


class Simulation(WorkerLoop):
    """The learner and the coordinator's side, over the workers' side (:class:`WorkerLoop`), over
    the fetches (:class:`~echo2.simulation.fetching.FetchRouting`), over the books (:class:`SimBooks`)."""

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        started = time.perf_counter()
        self._initial_plan()
        for worker in self.workers:
            self._run_worker(worker, holding=0)
        for worker in list(self.running.values()):
            self._cycle(worker)
        self.queue.run(until=lambda: self.finished)
        if not self.finished:
            raise SimulationStalled(f"simulation stalled at step {self.step} of {self.scenario.recipe.run.steps} "
                                    f"(t = {self.queue.now:.0f}s, {len(self.running)} workers running, "
                                    f"{len(self.ledger)} groups buffered)")
        return self.recorder.result(self, time.perf_counter() - started)

    def _initial_plan(self) -> None:
        """The provisioning rule on declared throughputs (an ``echo2 plan``), iterated with the
        dissemination estimate of the chosen set (``planning/provision.py`` does the same)."""
        for worker in self.workers:
            worker.alive, worker.throughput = True, worker.declared_throughput
        broadcast = self.scenario.broadcast
        for _ in range(5):
            uploads = [w.upload for w in self.workers if w.active or self.clock.broadcast_s is None]
            estimate = broadcast_seconds(self.payload, self.learner_upload, uploads, broadcast.mode,
                                         broadcast.chunk_mib * MIB)
            if estimate == self.clock.broadcast_s:
                break
            self.clock.broadcast_s = estimate
            self._decide()
        self.replanned_at = 0

    # ------------------------------------------------------------------ learner
    def _learner_try(self) -> None:
        if self.learner_busy or self.finished:
            return
        stale_before = self.ledger.dropped_stale
        versions = self.ledger.take(self.step, self.ledger.groups_per_step)
        if dropped := self.ledger.dropped_stale - stale_before:
            self.recorder.waste("stale", dropped * self.group_size)
            self._open_window()
        if versions is None:
            return
        self.counters["groups_trained"] += len(versions)
        now = self.queue.now
        if self.step == 0:
            self.startup_s = now - self.wait_since
        else:
            self.idle_s += now - self.wait_since
        self.learner_busy = True
        self.clock.batch_taken(now)
        self.queue.after(lognormal(self.rng, self.train_s, self.scenario.learner.step_cv), self._learner_done,
                         versions, now)

    def _learner_done(self, versions: list[int], started: float) -> None:
        now = self.queue.now
        self.busy_s += now - started
        self.learner_busy = False
        self.step += 1
        replan_due = self.clock.published(self.step, now)
        self.ledger.version = self.step
        self.census.publish(self.step, now)
        self.published_times.append(now)
        self._publish(self.step)
        self.clock.disseminated(self.recorder.step(self, versions, started))
        if self.step >= self.scenario.recipe.run.steps:
            self._finish()
            return
        self.wait_since = now
        if replan_due or self.replan_pending:
            self._replan("periodic")
        self._open_window()
        self._learner_try()

    def _finish(self) -> None:
        self.finished = True
        for worker in self.workers:
            self.billing.stop(worker.worker_id, worker.worker_class, self.queue.now)

    # ------------------------------------------------------------------ versions
    def _publish(self, version: int) -> None:
        """Async workers hear of the version at their next heartbeat (the others ask before a lease)."""
        if self.protocol != "async":
            return
        now, interval = self.queue.now, self.scenario.recipe.coordinator.heartbeat_interval_s
        for worker in self.running.values():
            if not worker.protocol.fetching:
                tick = now + (worker.heartbeat_phase - now) % interval
                self.queue.at(tick + worker.rtt_s / 2, self._heartbeat, worker, worker.epoch)

    def _census(self, worker: SimWorker) -> None:
        """Count ``worker``'s version (:class:`~echo2.core.dissemination.DisseminationCensus`: running,
        active and unparked workers count); record each version that reached the fleet."""
        counted = (worker.running and worker.active and worker.worker_id not in self.parked
                   and worker.protocol.version >= 0)
        for reached in self.census.hold(worker.worker_id, worker.protocol.version if counted else None, self.queue.now):
            self.recorder.disseminated(reached.version, reached.published, reached.reached)

    # ------------------------------------------------------------------ coordinator: leases
    def _lease_arrives(self, worker: SimWorker, epoch: int, version: int) -> None:
        if epoch == worker.epoch:
            self._respond(worker, epoch, version, self._lease_answer(worker, version))

    def _lease_answer(self, worker: SimWorker, version: int) -> LeaseAnswer:
        """:func:`echo2.core.leasing.answer_lease` over the simulation's books, now."""
        held = sum(len(lease.slots) for lease in worker.leases if lease.state == "out")
        others = any(w is not worker and w.active for w in self.running.values())
        return answer_lease(self.ledger, self.shares, worker, worker_version=version, requested=self.groups_per_lease,
                            held=held, active=worker.active, others_live=others, now=self.queue.now,
                            finished=self.finished)

    def _respond(self, worker: SimWorker, epoch: int, version: int, answer: LeaseAnswer) -> None:
        """Carry out the answer; the ones that change with time are held as the coordinator holds them."""
        if answer.status == "stop":
            return
        if answer.status == "parked" and not worker.active:
            self._park(worker, epoch, version)  # until activation picks it again
        elif answer.status == "parked":  # its leases kept expiring: held back until its parking ends
            self.queue.at(worker.parked_until, self._lease_arrives, worker, epoch, version)
        elif answer.status == "wait":
            worker.phase = "wait_window"
            self.waiting.append((worker, epoch, version))
        else:
            self._answer(worker, answer, version)

    def _answer(self, worker: SimWorker, answer: LeaseAnswer, version: int) -> None:
        """The reply reaches the worker; a lease asked for ahead is generated after the one in hand."""
        now = self.queue.now
        reply = now + worker.rtt_s / 2
        action = worker.protocol.answered(answer.status, self.ledger.version, worker.rtt_s)
        self._learn(worker, self.ledger.version, reply)
        if answer.status == "refresh":
            self.queue.at(max(reply, worker.busy_until), self._refreshed, worker, worker.epoch, action)
            return
        slots = list(self.ledger.grant(version, answer.size, lambda: None))
        self.counters["leases_issued"] += 1
        generate = lognormal(self.rng, len(slots) * self.group_size / worker.rate, worker.spec.throughput_cv)
        start = max(reply, worker.busy_until)
        worker.busy_until = start + generate
        lease = Lease(worker, version, slots, granted_at=now, starts_at=start, ends_at=start + generate + worker.rtt_s / 2)
        worker.leases.append(lease)
        worker.phase = "generate"
        self.queue.at(start, self._generating, worker, worker.epoch, lease)
        self.queue.at(start + generate, self._generated, worker, worker.epoch, generate)
        self.queue.at(lease.ends_at, self._submitted, worker, worker.epoch, lease)
        if lease.ends_at - now > self.scenario.recipe.coordinator.lease_timeout_s:
            self.queue.after(self.scenario.recipe.coordinator.lease_timeout_s, self._expire, lease)

    def _generating(self, worker: SimWorker, epoch: int, lease: Lease) -> None:
        """The worker starts on ``lease`` (unless it is leaving: it finished the lease in hand); an
        async one whose round trip is long against this lease asks for its next lease now, unless
        a fetched version waits to be swapped in (:mod:`echo2.rollout.lease_ahead`)."""
        if epoch != worker.epoch or worker.leaving:
            return
        self.recorder.interval(worker.worker_id, "generate", lease.starts_at, lease.ends_at - worker.rtt_s / 2,
                               lease.version)
        if worker.protocol.ask_ahead():
            self.queue.after(worker.rtt_s / 2, self._lease_arrives, worker, epoch, worker.protocol.version)

    def _generated(self, worker: SimWorker, epoch: int, seconds: float) -> None:
        if epoch == worker.epoch:
            worker.protocol.generated(seconds)

    def _submitted(self, worker: SimWorker, epoch: int, lease: Lease) -> None:
        if epoch != worker.epoch:
            return
        worker.leases.remove(lease)
        now = self.queue.now
        rollouts = len(lease.slots) * self.group_size
        self.recorder.generated += rollouts
        if lease.state == "expired":  # ran past its deadline: the coordinator refuses it
            self.counters["groups_rejected_expired_lease"] += len(lease.slots)
            self.recorder.waste("late", rollouts)
        else:
            lease.state = "done"
            delivered(worker)
            for slot in lease.slots:
                self.ledger.admit(slot, lease.version, lease.version)
            self.counters["leases_completed"] += 1
            self.counters["groups_accepted"] += len(lease.slots)
            busy_s = busy_seconds(now, lease.granted_at, worker.last_submitted_at)
            worker.throughput, worker.last_submitted_at = profile(worker.throughput, rollouts, busy_s), now
        if worker.leaving or not (worker.leases or worker.protocol.asking_ahead):
            self._cycle(worker, head_start_s=worker.rtt_s / 2)  # it began its next cycle when it sent these results
        self._open_window()  # a request held back by this worker's share of the window
        self._learner_try()

    def _expire(self, lease: Lease) -> None:
        if lease.state != "out":
            return
        lease.state = "expired"
        self.ledger.release(lease.slots)
        self.counters["leases_expired"] += 1
        missed(self.shares, lease.worker, self.queue.now, self.scenario.recipe.coordinator.lease_timeout_s)
        self._open_window()

    def _open_window(self) -> None:
        """Answer the held lease requests that the window now admits (in arrival order)."""
        while self.waiting:
            worker, epoch, version = self.waiting[0]
            if epoch != worker.epoch or worker.phase != "wait_window":
                self.waiting.popleft()
                continue
            answer = self._lease_answer(worker, version)
            if answer.status == "wait":
                return
            self.waiting.popleft()
            self._respond(worker, epoch, version, answer)

    # ------------------------------------------------------------------ coordinator: activation
    def _replan(self, reason: str) -> None:
        """Re-decide the active set with the coordinator's rule: answer the held requests of the
        workers it activates; the ones it parks get ``parked`` at their next request (a request
        waiting for the window is parked at once, as the coordinator's long-poll does)."""
        if not self.scenario.activation.enabled:
            return
        self.replanned_at, self.replan_pending = self.step, False
        self._decide()
        for worker in self.workers:
            if worker.active and worker.worker_id in self.parked:
                self._unpark(worker)
            elif not worker.active and worker.running:
                self._bill(worker)
                self._census(worker)
        self._open_window()

    def _decide(self) -> None:
        """Apply the provisioning rule to the live workers."""
        live = [w for w in self.workers if w.alive]
        decision = decide(self.activation, [WorkerView(w.worker_id, w.price_per_hour, w.throughput) for w in live],
                          self.clock.train_s, self.clock.broadcast_s)
        for worker in live:
            worker.active = worker.worker_id in decision.active

    def _request_replan(self, reason: str) -> None:
        """On an active worker's death: at once, unless a re-plan already ran at this step (then at its end)."""
        if self.replanned_at == self.step:
            self.replan_pending = True
        else:
            self._replan(reason)


def simulate(scenario: Scenario, timeline_workers: int = 12) -> SimResult:
    """Run ``scenario`` to its last learner step (raises :class:`SimulationStalled` if it cannot get there)."""
    return Simulation(scenario, timeline_workers).run()

