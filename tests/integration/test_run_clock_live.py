"""The run clock (``core/run_clock.py``): the learner's step time and a version's dissemination
time as activation reads them, kept by the coordinator and by the simulator alike."""

import time

import pytest
from simulation_support import scenario
from state_support import make_state, publish, submit_all

from echo2.coordinator.fleet import Fleet
from echo2.core.run_clock import RunClock
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import TimelineEvent
from echo2.simulation.engine import simulate


def _step(state, worker, version: int, seconds: float) -> None:
    """The learner's step: take the batch of version - 1, train ``seconds``, publish ``version``."""
    lease = state.work.lease(worker, worker_version=version - 1, max_groups=2, wait_s=0)
    submit_all(state, worker, lease)
    state.take_batch(version - 1, timeout_s=1)
    time.sleep(seconds)
    publish(state, version)


def test_the_coordinator_keeps_the_clock_replans_with_it_and_reports_disseminations():
    intervals = []
    state = make_state(staleness=1, fleet=Fleet(ActivationPolicy(enabled=True, rollouts_per_step=4, staleness=1)),
                       on_interval=lambda *line: intervals.append(line))
    worker = state.members.register("w")
    worker.throughput = 100.0
    _step(state, worker, 1, 0.2)
    assert 0.2 <= state.books.clock.train_s < 1.0
    assert state.fleet.need is not None  # re-planned with the step it timed (replan_every = 1)
    fetched = time.time()  # a fetch ends before its report arrives (a later end counts as the arrival)
    state.members.heartbeat(worker, 1, [TimelineEvent(kind="fetch", start=fetched - 0.5, end=fetched, version=1)])
    [(who, kind, start, end, version)] = [line for line in intervals if line[0] == "broadcast"]
    assert (kind, version, end) == ("disseminate", 1, fetched)
    [latency] = state.stats(0.0, 1.0).disseminated
    assert latency == pytest.approx(end - start) and state.books.clock.broadcast_s == pytest.approx(latency)
    assert state.stats(0.0, 1.0).disseminated == []  # reported once
    assert state.resume_snapshot()["clock"] == state.books.clock.state()


def _slow_clock(published):
    """A wrong rule: every step sampled ten times as long as it took."""
    def wrong(self, version, now):
        if self.batch_taken_at is not None:
            self.batch_taken_at -= 9 * (now - self.batch_taken_at)
        return published(self, version, now)
    return wrong


def test_a_wrong_rule_in_the_clock_changes_the_coordinators_plan_and_the_simulated_one(monkeypatch):
    def coordinator_train_s() -> float:
        state = make_state(staleness=1)
        worker = state.members.register("w")
        _step(state, worker, 1, 0.1)
        return state.books.clock.train_s

    def simulated_cheap_hours() -> float:  # the cheapest sufficient set for need = 32 / T_train x 1.1
        classes = [{"name": "cheap", "count": 10, "price_per_hour": 0.1, "rollouts_per_s": 10.0}]
        result = simulate(scenario(activation={"enabled": True}, recipe__staleness=2, recipe__rollout__groups_per_lease=1,
                                   fleet=classes))
        return result.worker_hours["cheap"] / (result.wall_s / 3600)

    right_s, right_workers = coordinator_train_s(), simulated_cheap_hours()
    assert right_s < 0.5 and right_workers == pytest.approx(4, rel=0.05)
    monkeypatch.setattr(RunClock, "published", _slow_clock(RunClock.published))
    assert coordinator_train_s() >= 1.0
    assert simulated_cheap_hours() < 2  # a learner "ten times slower" needs a tenth of the rollouts
