"""Cost-aware activation as the coordinator applies it: profiling, parking, re-activation, billing."""

import threading
import time

import pytest
from state_support import make_state, publish, submit_all

from echo2.coordinator.fleet import Fleet
from echo2.core.dissemination import DisseminationCensus
from echo2.core.profiling import LeaseCycle, profile
from echo2.core.smoothing import EMA_WEIGHT, ema
from echo2.planning.activation_rule import (
    MAX_OPTIONS,
    ActivationPolicy,
    Decision,
    WorkerView,
    apply,
    decide,
    dissemination_options,
)
from echo2.planning.billing import Billing
from echo2.protocol import TimelineEvent

# 2 groups x 2 completions = 4 rollouts per step; S = 1
POLICY = ActivationPolicy(enabled=True, rollouts_per_step=4, staleness=1, headroom=1.0)


def measured(state, record, rollouts_per_s):
    """Pretend ``record`` was profiled at ``rollouts_per_s``."""
    with state.cond:
        record.throughput = rollouts_per_s


def replan(state, train_s, broadcast_s):
    """Re-plan as the coordinator's run clock does, as if it had measured these step and dissemination times."""
    with state.cond:
        state.books.clock.train_s, state.books.clock.broadcast_s = train_s, broadcast_s
        state.parts.replan("periodic")


def test_cheap_worker_joining_parks_the_expensive_one_and_a_death_reactivates_it():
    state = make_state(staleness=1, fleet=Fleet(POLICY), heartbeat_timeout_s=0.3)
    expensive = state.members.register("expensive", price_per_hour=3.0)
    measured(state, expensive, 10.0)
    replan(state, train_s=1.0, broadcast_s=0.0)  # the rule asks for 4 rollouts/s
    assert expensive.active  # the only one there is
    cheap = state.members.register("cheap", price_per_hour=0.5)
    assert cheap.active  # on probation until measured
    measured(state, cheap, 5.0)
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert cheap.active and not expensive.active  # 5 >= 4 at a sixth of the price
    assert state.work.lease(expensive, worker_version=0, max_groups=2, wait_s=0).status == "parked"
    # the cheap one goes silent: it is declared dead and the parked one takes over
    expensive.last_seen = time.monotonic() + 10
    time.sleep(0.4)
    state.members.reap()
    assert not cheap.alive and expensive.active
    assert state.work.lease(expensive, worker_version=0, max_groups=2, wait_s=0).status == "granted"


def test_probation_ends_for_a_worker_whose_measure_could_not_change_the_choice():
    """An unmeasured worker is kept active (and billed) only while measuring it could matter: the
    measured set falls short, or the newcomer is cheaper than the whole chosen set (it could replace
    it alone), or it is free. A worker priced like the one that covers the need alone waits parked:
    before, one that never got a lease stayed active and billed all run (docs/capacity.md)."""
    fast = WorkerView("fast", 0.34, 10.0)  # covers the 4 rollouts/s asked alone
    def active(*newcomers):
        return decide(POLICY, [fast, *newcomers], train_s=1.0, broadcast_s=0.0).active
    assert active(WorkerView("twin", 0.34, None)) == {"fast"}
    assert active(WorkerView("cheaper", 0.20, None)) == {"fast", "cheaper"}
    assert active(WorkerView("free", 0.0, None)) == {"fast", "free"}
    # two measured workers at 0.34 each: a third at 0.34 could replace both alone
    pair = [WorkerView("a", 0.34, 2.5), WorkerView("b", 0.34, 2.5)]
    assert decide(POLICY, [*pair, WorkerView("c", 0.34, None)], 1.0, 0.0).active == {"a", "b", "c"}
    # the measured set falls short of the need: every unmeasured worker is tried
    slow = WorkerView("slow", 0.34, 1.0)
    assert decide(POLICY, [slow, WorkerView("twin", 3.0, None)], 1.0, 0.0).active == {"slow", "twin"}
    # no step time measured yet: everyone works
    assert decide(POLICY, [fast, WorkerView("twin", 0.34, None)], None, None).active == {"fast", "twin"}


def test_the_active_set_is_kept_until_switching_saves_more_than_the_margin():
    """Incumbents are weighed the switch margin (25%) cheaper: a faster estimate elsewhere swaps
    nobody, a lower need parks from the active set, a higher one activates at once, and a real
    saving still switches."""
    def view(name, throughput, active, price=1.0):
        return WorkerView(name, price, throughput, active)
    # 4 rollouts/s asked; a and b (2.1 each) cover it; c and d are estimated a little faster
    fleet = [view("a", 2.1, True), view("b", 2.1, True), view("c", 2.2, False), view("d", 2.2, False)]
    assert decide(POLICY, fleet, 1.0, 0.0).active == {"a", "b"}  # no swap on a 5% estimate
    fresh = [WorkerView(w.worker_id, w.price_per_hour, w.throughput) for w in fleet]  # nobody active yet
    assert decide(POLICY, fresh, 1.0, 0.0).active == {"c", "d"}  # the cheapest cover, ties to throughput
    # three active where two cover the need: one of them is parked, the parked one is not woken
    three = [view("a", 2.1, True), view("b", 2.1, True), view("c", 2.1, True), view("d", 2.2, False)]
    assert len(decide(POLICY, three, 1.0, 0.0).active & {"a", "b", "c"}) == 2
    assert decide(POLICY, three, 1.0, 0.0).active <= {"a", "b", "c"}
    # the need rises past the incumbents: the parked worker is activated at once
    assert decide(POLICY, [view("a", 2.1, True), view("d", 2.2, False)], 1.0, 0.0).active == {"a", "d"}
    # a real saving switches: a worker at half the price covering alone replaces two active ones
    cheap = [view("a", 2.1, True), view("b", 2.1, True), view("e", 4.5, False, price=0.5)]
    assert decide(POLICY, cheap, 1.0, 0.0).active == {"e"}


def test_a_scale_down_waits_until_it_saves_more_than_the_margin():
    def view(name, active=True):
        return WorkerView(name, 1.0, 1.5, active)
    # 4 rollouts/s asked; three of 1.5 cover it. Of four active, parking one saves 25%: not more than the margin
    four = [view(n) for n in "abcd"]
    assert decide(POLICY, four, 1.0, 0.0).active == {"a", "b", "c", "d"}
    # of five, parking two saves 40%: done, from the active set
    five = [view(n) for n in "abcde"]
    assert len(decide(POLICY, five, 1.0, 0.0).active) == 3
    # the incumbents no longer cover the need: scaling up is immediate, whatever it costs
    assert decide(POLICY, [view("a"), view("b"), view("c", active=False)], 1.0, 0.0).active == {"a", "b", "c"}


def test_one_outlier_moves_a_smoothed_time_a_bounded_way_and_a_lasting_rise_still_shows():
    """A fetch stalled 145 s behind a trickling relay joining a dissemination time of 2 s had made it
    31 s (and activation parked the worker for good): one value now counts at most 4x the average."""
    assert ema(2.0, 145.0, EMA_WEIGHT) == pytest.approx(0.8 * 2.0 + 0.2 * 8.0)  # 3.2 s, not 30.6
    assert ema(2.0, 0.5, EMA_WEIGHT) == pytest.approx(1.7)  # falls are not bounded
    average = 2.0
    for _ in range(12):  # the worker really did slow down to 60 s a version
        average = ema(average, 60.0, EMA_WEIGHT)
    assert average > 45.0


def test_parking_what_costs_nothing_never_happens():
    """Free workers whose set misses the aim at its slowest member's dissemination time stay active:
    parking them saves nothing (before, one stalled fetch parked an honest $0/h worker for the rest
    of the run, 3.7 learner steps/s down to 1.0-1.4)."""
    slowed = [WorkerView("a", 0.0, 3.0, True, arrival_s=0.5), WorkerView("b", 0.0, 3.0, True, arrival_s=0.5),
              WorkerView("stalled", 0.0, 3.0, True, arrival_s=40.0)]
    assert decide(POLICY, slowed, 1.0, 0.5).active == {"a", "b", "stalled"}
    priced = [WorkerView(w.worker_id, 1.0, w.throughput, True, w.arrival_s) for w in slowed]
    assert decide(POLICY, priced, 1.0, 0.5).active == {"a", "b"}  # where it saves, the slow one is parked


def test_a_worker_parked_long_enough_is_measured_again_when_that_could_change_the_choice():
    """Activation forgets: a worker parked ``remeasure_after_s`` is weighed as a new one, on
    probation where its measure could change the choice, with its old estimates dropped (they were
    never updated while it was parked: one slow lease parked it for good)."""
    policy = ActivationPolicy(enabled=True, rollouts_per_step=4, staleness=1, headroom=1.0, remeasure_after_s=300.0)
    incumbent = WorkerView("incumbent", 1.0, 5.0, True)
    def parked(name, price, parked_s):
        return WorkerView(name, price, 0.5, False, arrival_s=90.0, parked_s=parked_s)
    recent = decide(policy, [incumbent, parked("cheap", 0.5, 299.0)], 1.0, 0.0)
    assert recent.active == {"incumbent"} and not recent.remeasure
    stale = decide(policy, [incumbent, parked("cheap", 0.5, 300.0)], 1.0, 0.0)
    assert stale.active == {"incumbent", "cheap"} and stale.remeasure == {"cheap"}
    # as dear as the set that covers the need alone: measuring it could not change the choice, it stays parked
    dear = decide(policy, [incumbent, parked("dear", 1.0, 900.0)], 1.0, 0.0)
    assert dear.active == {"incumbent"} and not dear.remeasure

    class Worker:  # what the coordinator's records and the simulator's workers both have
        def __init__(self, worker_id, active):
            self.worker_id, self.price_per_hour, self.throughput, self.active, self.parked_at = \
                worker_id, 0.5, 0.5, active, None if active else 10.0
    workers = [Worker("incumbent", True), Worker("cheap", False)]
    census = DisseminationCensus()
    census.arrival_s.update(incumbent=1.0, cheap=90.0)
    changed = apply(stale, workers, census.forget, now=310.0)
    assert [w.worker_id for w in changed] == ["cheap"] and workers[1].active and workers[1].parked_at is None
    assert workers[1].throughput is None and "cheap" not in census.arrival_s and census.arrival_s["incumbent"] == 1.0
    apply(Decision(frozenset({"cheap"}), 4.0), workers, census.forget, now=320.0)
    assert not workers[0].active and workers[0].parked_at == 320.0 and workers[0].throughput == 0.5


def test_stale_workers_are_measured_again_one_at_a_time_the_longest_parked_first():
    """A thousand-worker fleet's parked workers fall stale together: all on probation at once had
    run 400 workers where 60 covered the need (the consumer scenario, 3.49x the centralized cost)."""
    policy = ActivationPolicy(enabled=True, rollouts_per_step=4, staleness=1, headroom=1.0, remeasure_after_s=300.0)
    incumbent = WorkerView("incumbent", 1.0, 5.0, True)
    parked = [WorkerView(f"p{n}", 0.5, 0.5, False, arrival_s=90.0, parked_s=300.0 + n) for n in range(50)]
    decision = decide(policy, [incumbent, *parked], 1.0, 0.0)
    assert decision.remeasure == {"p49"} and decision.active == {"incumbent", "p49"}
    newcomer = WorkerView("new", 0.5, None, True)  # one on probation already: nobody else is retried now
    waiting = decide(policy, [incumbent, newcomer, *parked], 1.0, 0.0)
    assert not waiting.remeasure and waiting.active == {"incumbent", "new"}


def test_the_coordinator_measures_a_long_parked_worker_again():
    state = make_state(staleness=1, fleet=Fleet(POLICY))
    dear = state.members.register("dear", price_per_hour=1.0)
    cheap = state.members.register("cheap", price_per_hour=0.9)
    measured(state, dear, 10.0)
    measured(state, cheap, 1.0)  # one slow first lease
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert dear.active and not cheap.active and cheap.parked_at is not None
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert not cheap.active and cheap.throughput == 1.0  # parked minutes ago: still its word
    with state.cond:
        cheap.parked_at -= POLICY.remeasure_after_s
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert cheap.active and cheap.throughput is None  # on probation, its old estimate forgotten
    assert state.work.lease(cheap, worker_version=0, max_groups=2, wait_s=0).status == "granted"


def test_a_lease_cycle_runs_from_submission_to_submission_less_what_is_not_the_workers_doing():
    cycle = LeaseCycle()

    def rate(now: float, granted_at: float) -> float | None:  # one rollout a lease, no history: 1 / cycle
        return cycle.submitted(now, granted_at, rollouts=1, throughput=None)

    assert rate(5.0, granted_at=3.0) == 1 / 2.0  # first lease: from its grant
    cycle.answered("granted", 6.0)  # the swap of a new version in and the request count
    assert rate(8.0, granted_at=6.0) == 1 / 3.0
    for status in ("wait", "parked", "refresh"):  # a full window, parking, waiting for a version: not generation
        cycle.answered(status, 9.0)
        cycle.answered("granted", 20.0)
        assert cycle.began_at == 20.0 and not cycle.paused
        assert rate(24.0, granted_at=20.0) == 1 / 4.0
    cycle.answered("granted", 25.0)  # asked ahead, granted while the lease before is generated
    assert rate(27.0, granted_at=25.0) == 1 / 3.0  # from the submission at 24, not the grant at 25
    assert cycle.submitted(29.0, 28.0, rollouts=4, throughput=1.0) == profile(1.0, 4, 2.0)  # folded into the average


def test_the_coordinator_restarts_a_workers_cycle_when_it_releases_a_request_it_held():
    """A parked worker's request is held open (its long-poll); the wait is activation's doing, not
    the worker's, so its next lease is timed from the release, not from its last submission."""
    state = make_state(staleness=1, fleet=Fleet(POLICY))
    dear = state.members.register("dear", price_per_hour=3.0)
    submit_all(state, dear, state.work.lease(dear, worker_version=0, max_groups=2, wait_s=0))
    submitted_at = dear.cycle.began_at
    assert submitted_at is not None
    cheap = state.members.register("cheap", price_per_hour=0.5)
    measured(state, cheap, 10.0)
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert cheap.active and not dear.active  # 10 rollouts/s cover the 4 asked at a sixth of the price
    died_at = []

    def cheap_dies():
        died_at.append(time.monotonic())
        cheap.last_seen = died_at[0] - 1000
        state.members.reap()

    timer = threading.Timer(0.5, cheap_dies)
    timer.start()
    try:
        answer = state.work.lease(dear, worker_version=0, max_groups=2, wait_s=10)  # held parked until then
    finally:
        timer.join()
    assert answer.status == "granted" and dear.active
    assert dear.cycle.began_at >= died_at[0] > submitted_at and not dear.cycle.paused


def test_throughput_is_averaged_as_seconds_per_rollout():
    # two cycles of 8 rollouts, 10 s and 30 s: the fleet gets 16 in 40 s, 0.4/s (a mean of rates says 0.53)
    once = profile(None, 8, 10.0)
    assert once == pytest.approx(0.8)
    twice = profile(once, 8, 30.0)
    assert 1 / twice == pytest.approx(0.7 * 10 / 8 + 0.3 * 30 / 8)
    assert profile(twice, 0, 5.0) == twice and profile(twice, 8, 0.0) == twice


def test_billing_counts_each_worker_activated_again():
    billing = Billing(learner_price_per_hour=1.0)
    billing.start("w", "gpu", 3600.0, now=0.0)
    billing.start("v", "gpu", 3600.0, now=0.0)
    billing.start("w", "gpu", 1800.0, now=1.0)  # re-priced, not re-activated
    billing.stop("w", "gpu", now=2.0)  # parked
    billing.start("w", "gpu", 3600.0, now=3.0, active=False)  # billed parked: not active
    billing.start("w", "gpu", 3600.0, now=4.0)  # activated again
    assert billing.activations == {"w": 2, "v": 1} and billing.reactivations() == 1
    assert billing.seconds["gpu"] == pytest.approx(2 + 4)  # w active 0-2, v all 4 s


def test_a_parked_newcomer_is_tried_when_the_measured_set_loses_its_cover():
    state = make_state(staleness=1, fleet=Fleet(POLICY), heartbeat_timeout_s=0.3)
    first = state.members.register("first", price_per_hour=1.0)
    measured(state, first, 10.0)
    replan(state, train_s=1.0, broadcast_s=0.0)
    second = state.members.register("second", price_per_hour=1.0)
    assert first.active and not second.active  # could not make the choice cheaper: not billed
    assert state.work.lease(second, worker_version=0, max_groups=2, wait_s=0).status == "parked"
    second.last_seen = time.monotonic() + 10
    time.sleep(0.4)
    state.members.reap()  # the measured worker dies: the newcomer is all there is
    assert not first.alive and second.active


def test_unreachable_target_aims_for_the_knee_instead_of_running_everyone():
    # S = 0 never reaches U = 1; 95% of the best reachable (1 / (1 + 0)) needs 4 / (1/0.95 - 1) = 76 x 1.1 rollouts/s
    state = make_state(staleness=0, fleet=Fleet(ActivationPolicy(enabled=True, rollouts_per_step=4, staleness=0)))
    workers = [state.members.register(f"w{i}", price_per_hour=1.0 + i) for i in range(3)]
    for worker in workers:
        measured(state, worker, 100.0)
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert [w.active for w in workers] == [True, False, False]
    assert state.fleet.need == pytest.approx(4 / (1 / 0.95 - 1) * 1.1)
    # a slow link: S = 1 with T_bcast = 3 T_train caps utilization at 2 / 4; the knee asks for 4 / 0.21 x 1.1 = 21
    # rollouts/s, where asking for U = 1 would have activated all three workers for no gain
    replan(state, train_s=1.0, broadcast_s=3.0)
    assert sum(w.active for w in workers) == 1
    # the whole fleet falls short of even the knee: everyone works
    replan(state, train_s=0.01, broadcast_s=0.0)
    assert all(w.active for w in workers)


def test_a_set_is_weighed_at_its_own_members_dissemination_times_so_the_choice_holds():
    # S = 1, 4 rollouts per step, 1 s steps: the data is on time iff T_train + T_bcast + 4 / sum(mu) <= 2 s. Two
    # workers near the learner hold a version in 0.2 s, two at the end of the chain in 3 s; each makes 3 rollouts/s.
    def views(active):
        return [WorkerView(f"{where}{i}", 1.0, 3.0, f"{where}{i}" in active, arrival)
                for where, arrival in (("near", 0.2), ("far", 3.0)) for i in range(2)]

    everyone = {"near0", "near1", "far0", "far1"}
    # measured to the last active worker (3 s, all four active), not even the knee is in reach: the old rule ran
    # everyone. Weighed at their own times the near pair reaches U = 1: 4 / (2 - 1 - 0.2) = 5 rollouts/s
    assert decide(POLICY, [WorkerView(v.worker_id, 1.0, 3.0, True) for v in views(everyone)],
                  train_s=1.0, broadcast_s=3.0).active == everyone
    decision = decide(POLICY, views(everyone), train_s=1.0, broadcast_s=3.0)
    assert decision.active == {"near0", "near1"}
    assert decision.need == pytest.approx(5.0)
    # and the next re-plan, measuring 0.2 s now that only they are active, keeps them: no swing back
    assert decide(POLICY, views(decision.active), train_s=1.0, broadcast_s=0.2).active == decision.active


def test_the_dissemination_times_weighed_are_a_bounded_set_of_quantiles():
    workers = [WorkerView(f"w{i}", 1.0, 1.0, False, float(i)) for i in range(100)]
    options = dissemination_options(POLICY, workers, train_s=1.0, broadcast_s=7.0)
    limits = [option.times.broadcast_s for option in options]
    assert len(limits) == MAX_OPTIONS and limits[0] == 0.0 and limits[-1] == 99.0
    assert [len(option.workers) for option in options] == [int(limit) + 1 for limit in limits]
    assert options[-1].throughput == 100.0
    untimed = dissemination_options(POLICY, [WorkerView("x", 1.0, 1.0)], train_s=1.0, broadcast_s=7.0)
    assert [option.times.broadcast_s for option in untimed] == [7.0]


def test_throughput_is_profiled_from_submissions_and_cost_is_billed_for_active_time():
    state = make_state(staleness=1, fleet=Fleet(POLICY))
    worker = state.members.register("w", price_per_hour=36.0)
    lease = state.work.lease(worker, worker_version=0, max_groups=2, wait_s=0)
    time.sleep(0.1)
    submit_all(state, worker, lease)
    assert worker.throughput == pytest.approx(4 / 0.1, rel=0.5)  # 4 rollouts in ~0.1 s
    time.sleep(0.1)
    costs = state.stats(learner_price_per_hour=3600.0, wall_s=1.0).costs
    assert costs["cost/w_usd"] == pytest.approx(36.0 * state.fleet.billing.seconds["w"] / 3600)
    assert 0.2 / 3600 * 36 * 0.5 < costs["cost/w_usd"] < 1.0
    assert costs["cost_learner_usd"] == pytest.approx(1.0)
    assert costs["cost_centralized_usd"] > costs["cost_learner_usd"]


def test_a_quarantined_worker_leaves_activation_billing_the_relay_plan_and_the_census():
    """It may keep sending heartbeats, but it gets no lease: counted as capacity it left the fleet
    short, billed it cost what it could not earn, as a relay it took peers, in the census each
    version's spread waited for it."""
    state = make_state(staleness=1, fleet=Fleet(POLICY))
    honest, cheat = state.members.register("honest", price_per_hour=0.5), state.members.register("cheat", price_per_hour=0.5)
    for record in (honest, cheat):
        measured(state, record, 3.0)  # 4 rollouts/s needed: both
    replan(state, train_s=1.0, broadcast_s=0.0)
    assert honest.active and cheat.active and set(state.fleet.billing.billing) == {honest.worker_id, cheat.worker_id}

    def fetched(record, version: int, at: float) -> None:
        state.members.heartbeat(record, version, [TimelineEvent(kind="fetch", start=at - 0.5, end=at, version=version)])

    now = time.time()
    for record in (honest, cheat):
        fetched(record, 0, now)
    state.quarantine(cheat.worker_id, "fabricated log-probs")
    assert [node.id for node in state.registry.plan_nodes()] == [honest.worker_id]
    assert set(state.fleet.billing.billing) == {honest.worker_id}  # stopped at the quarantine
    assert honest.active  # alone: it is the fleet, even short of the need
    publish(state, 1)
    assert state.books.census.spreading()
    fetched(honest, 1, time.time())  # spread once the honest worker holds it: the other is not waited for
    assert not state.books.census.spreading() and len(state.parts.disseminated) == 1


def test_a_fetch_reported_to_end_in_the_future_is_timed_when_the_report_arrived():
    """Within the clock-skew allowance a worker could claim a fetch ends a day from now: a version
    then took the fleet a day to get, and the smoothed dissemination time ran every worker."""
    state = make_state(staleness=1, fleet=Fleet(POLICY))
    honest, liar = state.members.register("honest"), state.members.register("liar")
    for record in (honest, liar):
        state.members.heartbeat(record, 0, [TimelineEvent(kind="fetch", start=time.time() - 1, end=time.time(), version=0)])
    publish(state, 1)
    state.members.heartbeat(honest, 1, [TimelineEvent(kind="fetch", start=time.time() - 0.2, end=time.time(), version=1)])
    far = time.time() + 80_000.0  # inside check_telemetry's day
    state.members.heartbeat(liar, 1, [TimelineEvent(kind="fetch", start=far - 1, end=far, version=1)])
    assert state.parts.disseminated and state.parts.disseminated[0] < 5.0  # timed at the report, not at its claim
    assert state.books.census.arrival_s[liar.worker_id] < 5.0


def test_a_training_services_client_steps_size_its_fleet_as_a_learners_steps_do():
    """``echo2 serve``: each optimizer step of a client is one sample of the step time (the training it
    ran) and of the rollouts a step needs (the completions its clients asked for meanwhile); the
    same rule then parks what the clients' pace does not need."""
    from echo2.service.demand import ServiceDemand

    state = make_state(staleness=1, fleet=Fleet(ActivationPolicy(enabled=True, rollouts_per_step=1, staleness=1,
                                                                 headroom=1.0)))
    expensive, cheap = state.members.register("expensive", price_per_hour=3.0), state.members.register("cheap", price_per_hour=0.5)
    measured(state, expensive, 10.0)
    measured(state, cheap, 5.0)
    demand = ServiceDemand(state)
    demand.asked(16)
    demand.asked(16)
    demand.stepped(training_s=8.0)  # 32 completions a step over 8 s of training: 4 rollouts/s
    assert state.fleet.policy.rollouts_per_step == 32 and state.books.clock.train_s == 8.0
    assert cheap.active and not expensive.active  # 5 >= 4 at a sixth of the price
    for _ in range(8):  # the clients now ask for four times as much a step: the cheap one alone falls short
        demand.asked(128)
        demand.stepped(training_s=8.0)
    assert expensive.active
