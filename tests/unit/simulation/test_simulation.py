"""The discrete-event simulator on tiny scenarios whose outcome can be worked out by hand."""

import math
import random
import re
import statistics

import pytest
from paths import REPO
from simulation_support import recipe, scenario

from echo2.planning.activation import Candidate, choose_active
from echo2.planning.broadcast_time import arrival_seconds
from echo2.planning.capacity import StepTimes, predicted_utilization, step_period
from echo2.simulation.dissemination import LearnerUplink, RelayUplink
from echo2.simulation.engine import simulate
from echo2.simulation.events import EventQueue
from echo2.simulation.results import write_run_dir
from echo2.simulation.scenario import dotted_overrides, load_scenario
from echo2.units import MIB, link_bytes_per_s


def test_sync_utilization_is_the_serial_sum_of_the_capacity_model():
    """S = 0, one worker, no jitter: every step waits for fetch + generation, exactly the model's sum."""
    fetch, rate = 0.3, 64.0
    result = simulate(scenario(recipe__protocol="sync", recipe__staleness=0,
                               fleet=[{"name": "w", "count": 1, "rollouts_per_s": rate, "fetch_delay_s": fetch}]))
    times = StepTimes(train_s=1.0, broadcast_s=fetch, rollouts_per_step=32, staleness=0)
    idle_per_step = result.idle_s / 39  # the wait for the first batch is start-up, not idle
    assert idle_per_step == pytest.approx(fetch + 32 / rate, rel=1e-9)
    assert 1.0 / (1.0 + idle_per_step) == pytest.approx(predicted_utilization(times, rate), rel=1e-9)
    assert result.staleness == {0: 40 * 8}


def test_async_with_a_fast_fleet_keeps_the_learner_busy_and_within_the_staleness_bound():
    result = simulate(scenario(recipe__staleness=2, fleet=[{"name": "w", "count": 3, "rollouts_per_s": 100.0,
                                                            "throughput_cv": 0.3, "rtt_ms": 20}]))
    assert result.utilization > 0.99
    assert max(result.staleness) <= 2 and sum(result.staleness.values()) == 40 * 8
    assert result.reliability["groups_dropped_stale"] == 0


@pytest.mark.parametrize("seed", range(5))
def test_learner_uplink_matches_the_broadcast_time_model(seed):
    """Fetches asked at once end where the capacity model's star puts them (first come first served,
    IN_FLIGHT chunks per fetch), for payloads of a window or less and of many whole windows."""
    rng = random.Random(seed)
    workers, chunk, upload = rng.randint(1, 12), MIB, rng.uniform(5e6, 80e6)
    payload = rng.choice([1.5 * MIB, rng.randint(2, 20) * 2 * MIB])
    queue, ends = EventQueue(), []
    uplink = LearnerUplink(queue, upload, payload, chunk)
    for _ in range(workers):
        uplink.fetch(math.inf, lambda: ends.append(queue.now), lambda: True)
    queue.run(until=lambda: False)
    assert sorted(ends) == pytest.approx(arrival_seconds(payload, upload, [math.inf] * workers, "star", chunk))


def test_relay_uplink_shares_equally_and_gives_a_capped_fetchs_spare_to_the_others():
    queue, ends = EventQueue(), {}
    uplink = RelayUplink(queue, upload=10.0)
    uplink.send(20.0, math.inf, lambda: ends.setdefault("a", queue.now))
    uplink.send(20.0, 2.0, lambda: ends.setdefault("slow", queue.now))  # its downlink takes 2 of the 10
    queue.at(1.0, lambda: uplink.send(8.0, math.inf, lambda: ends.setdefault("late", queue.now)))
    queue.run(until=lambda: False)
    # 0-1 s: a at 8/s (20 -> 12); then a and late at 4/s each: late done at 3 s, a at 12 - 8 = 4 left,
    # then alone at 8/s: 3.5 s; slow at 2/s throughout: 10 s
    assert ends == pytest.approx({"late": 3.0, "a": 3.5, "slow": 10.0})


def test_a_cancelled_relay_fetch_reports_what_it_had_left_and_frees_its_share():
    queue, ends = EventQueue(), {}
    uplink = RelayUplink(queue, upload=10.0)
    uplink.send(30.0, math.inf, lambda: ends.setdefault("a", queue.now))
    cut = uplink.send(30.0, math.inf, lambda: ends.setdefault("cut", queue.now))
    left = {}
    queue.at(2.0, lambda: left.setdefault("cut", uplink.cancel(cut)))
    queue.run(until=lambda: False)
    assert left["cut"] == pytest.approx(20.0)
    assert ends == pytest.approx({"a": 4.0})  # 10 bytes in 2 s at 5/s, the other 20 alone at 10/s


def test_star_grows_with_the_fleet_and_the_chain_does_not():
    """Simulated dissemination latency: N * M / B for a star, (M + (N - 1) * chunk) / B for a chain
    (a step outlasts either, so versions never queue for the links)."""
    payload_mb, cap_mbps, workers = 8.0, 80.0, 4
    results = {}
    for mode in ("star", "pipelined"):
        result = simulate(scenario(model={"name": "m", "parameters_b": 0.004, "payload_gb": payload_mb / 1000},
                                   learner={"train_step_s": 5.0, "upload_mbps": cap_mbps},  # no queueing
                                   recipe=recipe(steps=30, groups_per_lease=1, staleness=8, heartbeat_interval_s=0.01),
                                   broadcast={"mode": mode, "chunk_mib": 1.0},
                                   fleet=[{"name": "w", "count": workers, "rollouts_per_s": 3200.0,
                                           "upload_mbps": cap_mbps}]))
        results[mode] = sorted(latency for _, latency in result.dissemination)[len(result.dissemination) // 2]
    bandwidth = link_bytes_per_s(cap_mbps)
    assert results["star"] == pytest.approx(workers * payload_mb * 1e6 / bandwidth, rel=0.05)
    assert results["pipelined"] == pytest.approx((payload_mb * 1e6 + (workers - 1) * MIB) / bandwidth, rel=0.05)


def _star_fetches(payload_chunks: float, starts: list[float], dies: dict[int, float] | None = None) -> dict[int, float]:
    """When each fetch of a star uplink of 1 chunk/s ends (chunks of 1; fetch i asked at starts[i],
    its worker gone at dies[i])."""
    queue, done, dead = EventQueue(), {}, set()
    uplink = LearnerUplink(queue, upload=1.0, payload=payload_chunks, chunk=1.0)
    for index, start in enumerate(starts):
        queue.at(start, uplink.fetch, math.inf, lambda i=index: done.setdefault(i, queue.now),
                 lambda i=index: i not in dead)
    for index, at in (dies or {}).items():
        queue.at(at, dead.add, index)
    queue.run(until=lambda: False)
    return done


def test_star_uplink_serves_chunk_requests_first_come_first_served():
    # a payload of one window (2 chunks) asked by two at once: one after the other, as a wave times it
    assert _star_fetches(2, [0.0, 0.0]) == pytest.approx({0: 2.0, 1: 4.0})
    # a payload of many chunks: side by side, the k-th of n at (n (M - w) + k w) / B as a wave times it
    assert _star_fetches(6, [0.0, 0.0]) == pytest.approx({0: 10.0, 1: 12.0})
    # asked one copy-time apart (async workers fetching back to back): they share from then on
    assert _star_fetches(6, [0.0, 6.0]) == pytest.approx({0: 6.0, 1: 12.0})
    assert _star_fetches(6, [0.0, 3.0]) == pytest.approx({0: 8.0, 1: 12.0})
    # a worker gone mid-fetch frees the uplink and is never told it is done
    assert _star_fetches(6, [0.0, 0.0], dies={1: 3.5}) == pytest.approx({0: 8.0})


@pytest.mark.parametrize("staleness", [1, 2])
def test_a_saturated_star_runs_at_the_capacity_models_period(staleness):
    """Two async workers fetching back to back from a learner uplink that needs C = 1 s per copy
    (the real runs' timelines: each worker fetches on its own schedule, one copy-time apart, and
    holds its own version): the simulator's period is the capacity model's saturated-star period."""
    result = simulate(scenario(model={"name": "m", "parameters_b": 0.0004, "payload_gb": 0.0015},
                               learner={"train_step_s": 0.3, "step_cv": 0.0, "upload_mbps": 12.0},
                               recipe=recipe(steps=60, groups_per_lease=1, staleness=staleness, heartbeat_interval_s=0.5),
                               broadcast={"mode": "star", "chunk_mib": 1.0},
                               fleet=[{"name": "w", "count": 2, "rollouts_per_s": 320.0, "throughput_cv": 0.0}]))
    star = StepTimes(train_s=0.3, broadcast_s=2.0, rollouts_per_step=32, staleness=staleness, uplink_s=1.0, copies=2)
    assert result.train_wall_s / 60 == pytest.approx(step_period(star, 640.0), rel=0.06)


def test_preempted_workers_leases_are_reissued_and_every_step_is_full():
    result = simulate(scenario(recipe__run__steps=60, recipe__coordinator__heartbeat_timeout_s=2.0,
                               fleet=[{"name": "steady", "count": 2, "rollouts_per_s": 40.0},
                                      # slower than the steady pair, so that a preemption often cuts a lease
                                      {"name": "spot", "count": 2, "rollouts_per_s": 10.0, "preemption_per_hour": 400,
                                       "recovery_s": 3.0}]))
    books = result.reliability
    assert books["workers_dead"] > 0 and books["leases_expired"] > 0 and result.wasted.get("preempted", 0) > 0
    assert books["groups_trained"] == 60 * 8
    assert books["leases_issued"] == books["leases_completed"] + books["leases_expired"] + books["leases_outstanding"]
    assert books["prompts_requeued"] >= books["leases_expired"]


def test_a_lease_finishing_within_the_notice_is_still_submitted():
    result = simulate(scenario(recipe__run__steps=60, fleet=[
        {"name": "steady", "count": 1, "rollouts_per_s": 40.0},
        {"name": "spot", "count": 2, "rollouts_per_s": 40.0, "preemption_per_hour": 400, "recovery_s": 3.0,
         "preemption_notice_s": 60.0}]))
    assert result.reliability["workers_left"] > 0 and result.reliability["workers_dead"] == 0
    assert result.reliability["leases_expired"] == 0 and "late" not in result.wasted
    # each of the 10 machines back from a preemption starts on trial, its one lent group beyond the
    # window: at 400 preemptions an hour one group of the run's 489 was dropped as stale
    assert result.reliability["groups_dropped_stale"] <= 1


def test_activation_runs_the_cheapest_sufficient_set():
    """Need = R / T_train x headroom = 32 / 1 x 1.1: four cheap workers (10 rollouts/s each) beat a premium pair.
    One group per lease keeps the measured dissemination (publish -> loaded, after the lease in hand) short."""
    classes = [{"name": "cheap", "count": 10, "price_per_hour": 0.1, "rollouts_per_s": 10.0},
               {"name": "premium", "count": 2, "price_per_hour": 2.0, "rollouts_per_s": 40.0}]
    result = simulate(scenario(activation={"enabled": True}, recipe__staleness=2, recipe__rollout__groups_per_lease=1,
                               fleet=classes))
    need = 32 / 1.0 * 1.1
    expected = choose_active([Candidate(f"{c['name']}#{i}", c["price_per_hour"], c["rollouts_per_s"])
                              for c in classes for i in range(c["count"])], need)
    assert expected.active == tuple(f"cheap#{i}" for i in range(4))
    hours = result.worker_hours
    assert hours["premium"] == 0
    assert hours["cheap"] == pytest.approx(4 * result.wall_s / 3600, rel=0.01)
    assert result.utilization > 0.99


def test_centralized_baseline_is_serial_generation_then_training():
    """It trains as long as the distributed learner minus publishing, and hands weights over instead."""
    result = simulate(scenario(learner={"train_step_s": 1.2, "publish_s": 0.2, "gpus": 2, "price_per_gpu_hour": 3.6,
                                        "generation_tokens_per_s_per_gpu": 64.0, "weight_sync_s": 0.5},
                               workload__response_tokens=4.0))
    baseline = result.centralized
    generate = 32 * 4.0 / (2 * 64.0)
    assert baseline.wall_s == pytest.approx(40 * (1.0 + generate + 0.5))
    assert baseline.cost_usd == pytest.approx(2 * 3.6 * baseline.wall_s / 3600)
    assert baseline.utilization == pytest.approx(1.0 / (1.0 + generate + 0.5))


STRAGGLER_GROUPS = [[20.0] * 4] * 7 + [[20.0] * 3 + [400.0]]
"""One group in eight has a response 20 times as long as the others: the straggler."""


def _straggler_scenario(lengths: dict | None, **changes):
    """B = 8 groups of 4 a step, 4 s of training; the learner's one GPU generates 800 tokens/s with
    32 sequences in flight but a sequence alone only 40/s; six workers on the same curve, async
    S = 3. A worker submits a lease whole (echo2's engines return a lease's batch together), so a
    lease holding the straggler keeps that worker for 10 s: within the staleness budget, and the
    fleet has the headroom to cover it."""
    return scenario(learner={"train_step_s": 4.0, "price_per_gpu_hour": 3.0, "generation_tokens_per_s_per_gpu": 800.0,
                             "single_sequence_tokens_per_s": 40.0, "generation_sequences": 32},
                    workload={"response_tokens": statistics.fmean(x for g in STRAGGLER_GROUPS for x in g),
                              **({"lengths": lengths} if lengths else {})},
                    recipe=recipe(steps=60, groups_per_lease=2, staleness=3, heartbeat_interval_s=0.01),
                    fleet=[{"name": "w", "count": 6, "tokens_per_s": 200.0, "single_sequence_tokens_per_s": 40.0,
                            "max_sequences": 8, "price_per_hour": 0.1}], **changes)


def test_a_long_response_makes_the_centralized_step_wait_and_the_distributed_learner_does_not():
    """The straggler is drawn into most centralized steps (8 groups a step, one in eight long), and
    each such step waits for its 400 tokens at single-sequence speed; the distributed learner takes
    the oldest fresh groups as they arrive, so a worker stuck on the straggler holds up no step."""
    uneven = simulate(_straggler_scenario({"groups": STRAGGLER_GROUPS}))
    even = simulate(_straggler_scenario(None))
    straggler_s = 380 / 40.0  # the last 380 tokens, alone
    centralized_step = uneven.centralized.generation_s / 60
    assert centralized_step > 0.5 * straggler_s > even.centralized.generation_s / 60
    assert uneven.centralized.wall_s > 2 * even.centralized.wall_s
    distributed_step = uneven.train_wall_s / (uneven.steps - 1)
    assert distributed_step < 1.1 * 4.0 < 0.5 * (4.0 + centralized_step)
    assert uneven.utilization > 0.95


def test_every_response_at_the_mean_reproduces_the_planner_without_lengths():
    """Measured lengths all equal to the mean give the same run, both arms, as no distribution."""
    same = [[33.0] * 4] * 3
    plain = simulate(scenario(workload__response_tokens=33.0, fleet=[{"name": "w", "count": 2, "tokens_per_s": 4000.0}],
                              learner={"train_step_s": 1.0, "generation_tokens_per_s_per_gpu": 500.0}))
    measured = simulate(scenario(workload={"lengths": {"groups": same}},
                                 fleet=[{"name": "w", "count": 2, "tokens_per_s": 4000.0}],
                                 learner={"train_step_s": 1.0, "generation_tokens_per_s_per_gpu": 500.0}))
    assert measured.scenario.workload.response_tokens == 33.0
    assert measured.wall_s == pytest.approx(plain.wall_s, rel=1e-12)
    assert measured.centralized.wall_s == pytest.approx(plain.centralized.wall_s, rel=1e-12)
    assert plain.centralized.generation_s == pytest.approx(40 * 32 * 33.0 / 500.0)


def test_the_trainers_memory_shrinks_the_colocated_engines_batch():
    """80 GB x 0.9 less 16 GB of weights less what the trainer keeps: the KV room, in sequences of
    prompt + mean response at the model's KV bytes per token."""
    base = {"train_step_s": 1.0, "generation_tokens_per_s_per_gpu": 8000.0, "single_sequence_tokens_per_s": 150.0,
            "generation_sequences": 256, "gpu_memory_gb": 80.0}
    model = {"name": "m", "parameters_b": 8.0, "payload_gb": 0.01, "kv_bytes_per_token": 147456}
    alone = scenario(learner=base, model=model, workload__response_tokens=2000.0)
    shared = scenario(learner={**base, "trainer_resident_gb": 16.0}, model=model, workload__response_tokens=2000.0)
    context = 2000.0
    room = 0.9 * 80e9 - 16e9
    assert alone.learner.colocated_curve(alone.model, context).max_sequences == min(256, int(room // (147456 * context)))
    assert shared.learner.colocated_curve(shared.model, context).max_sequences == int((room - 16e9) // (147456 * context))
    assert shared.learner.colocated_curve(shared.model, context).tokens_per_s(256) < 0.9 * 8000.0
    with pytest.raises(ValueError, match="trainer_resident_gb leaves the co-located engine no KV room: 80 GB x 0.9 - 16.0 GB of weights - 60 GB"):
        scenario(learner={**base, "trainer_resident_gb": 60.0}, model=model)
    with pytest.raises(ValueError, match="single_sequence_tokens_per_s needs generation_sequences"):
        scenario(learner={**base, "generation_sequences": None}, model=model)


def test_learner_step_time_from_flops():
    s = scenario(learner={"gpus": 8, "peak_tflops_per_gpu": 1000.0, "mfu": 0.5, "publish_s": 2.0},
                 model={"name": "m", "parameters_b": 30.0, "active_parameters_b": 3.0},
                 workload__prompt_tokens=100.0, workload__response_tokens=900.0)
    assert s.train_compute_s() == pytest.approx(8 * 3e9 * 32 * 1000 / (8 * 1000e12 * 0.5))
    assert s.train_step_s() == pytest.approx(s.train_compute_s() + 2.0)
    assert s.model.payload_bytes == 30e9 * 2


def test_run_directory_has_the_real_runs_files(tmp_path):
    out = write_run_dir(simulate(scenario(recipe__run__steps=5)), tmp_path / "sim")
    for name in ("metrics.jsonl", "timeline.jsonl", "reliability.json", "summary.txt", "scenario.yaml",
                 "simulation.json"):
        assert (out / name).stat().st_size > 0
    assert load_scenario(out / "scenario.yaml") == scenario(recipe__run__steps=5)


def test_overrides_reach_nested_and_list_fields():
    overrides = dotted_overrides(["recipe.staleness=3", "fleet.0.count=7"])
    assert overrides == {"recipe": {"staleness": 3}, "fleet": {"0": {"count": 7}}}
    path = REPO / "configs" / "scenarios" / "qwen3-8b-256w-wan.yaml"
    changed = load_scenario(path, overrides)
    assert changed.recipe.staleness == 3 and changed.fleet[0].count == 7
    with pytest.raises(ValueError, match="recipe.bogus: unknown key"):
        load_scenario(path, {"recipe": {"bogus": 1}})
    with pytest.raises(ValueError, match="config key 'fleet.5': '5' is not an index of a list of 2"):
        load_scenario(path, dotted_overrides(["fleet.5.count=1"]))


SOURCED = re.compile(r"^\s*-?\s*(price_per|tokens_per_s|generation_tokens|peak_tflops|mfu|parameters_b|"
                     r"active_parameters_b|upload_mbps|rtt_ms|preemption_per_hour|response_tokens|single_sequence|"
                     r"max_sequences|generation_sequences|gpu_memory_gb|trainer_resident_gb|kv_bytes_per_token|"
                     r"max_tokens|across_cv|within_cv|payload_gb)")


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load_and_state_their_sources(path):
    fleet = load_scenario(path).fleet
    assert 16 <= sum(c.count for c in fleet) <= 1000
    unsourced = [line for line in path.read_text().splitlines()
                 if SOURCED.match(line) and not re.search(r"#\s*(source|assumption|derived)", line)]
    assert not unsourced, f"inputs without '# source:' or '# assumption': {unsourced}"


def test_a_simulated_async_worker_asks_ahead_when_its_round_trip_is_long_against_its_leases(monkeypatch):
    """Leases of 0.1 s behind a 0.08 s round trip, a fast learner and a slow uplink (a version every
    ten leases or so): asking for the next lease while generating hides the round trip (as the live
    worker does, :mod:`echo2.rollout.lease_ahead`); off, each lease costs 0.18 s."""
    from echo2.core import leasing

    def run():
        return simulate(scenario(learner={"train_step_s": 0.01, "upload_mbps": 80},
                                 recipe=recipe(steps=200, groups_per_lease=8, staleness=32, heartbeat_interval_s=0.01),
                                 fleet=[{"name": "w", "count": 2, "rollouts_per_s": 320.0, "rtt_ms": 80}]))

    asking = run()
    monkeypatch.setattr(leasing, "ASK_AHEAD_AT", math.inf)
    not_asking = run()
    assert not_asking.wall_s / asking.wall_s > 1.25
    assert max(asking.staleness) <= 32 and asking.reliability["groups_dropped_stale"] == 0
