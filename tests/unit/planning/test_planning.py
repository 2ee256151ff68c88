"""The capacity model and cost-aware activation (pure logic)."""

import inspect
import itertools
import math
import random
import re
from dataclasses import replace

import pytest

from echo2.broadcast.downloader import fetch_version
from echo2.cli import main
from echo2.config import WorkerClass
from echo2.planning.activation import Candidate, choose_active
from echo2.planning.broadcast_time import IN_FLIGHT, arrival_seconds, broadcast_seconds, staggered_broadcast_s
from echo2.planning.capacity import (
    StepTimes,
    max_utilization,
    predicted_utilization,
    provisioning_need,
    required_throughput,
    step_period,
)
from echo2.planning.inventory import Inventory, LearnerSpec, load_inventory
from echo2.planning.provision import provision


def test_sync_period_is_the_serial_sum():
    times = StepTimes(train_s=2.0, broadcast_s=1.0, rollouts_per_step=100, staleness=0)
    assert step_period(times, throughput=50.0) == pytest.approx(2.0 + 1.0 + 2.0)
    assert predicted_utilization(times, 50.0) == pytest.approx(0.4)
    assert required_throughput(times) == math.inf  # S = 0 can never saturate the learner


def test_async_saturates_when_throughput_and_latency_conditions_hold():
    times = StepTimes(train_s=2.0, broadcast_s=1.0, rollouts_per_step=100, staleness=1)
    # throughput condition needs 50/s; latency condition S*T >= Tb + R/mu needs R/mu <= 1 -> 100/s
    assert required_throughput(times) == pytest.approx(100.0)
    assert predicted_utilization(times, 100.0) == pytest.approx(1.0)
    assert predicted_utilization(times, 99.0) < 1.0
    # with S = 2 only the throughput condition binds
    relaxed = StepTimes(train_s=2.0, broadcast_s=1.0, rollouts_per_step=100, staleness=2)
    assert required_throughput(relaxed) == pytest.approx(50.0)
    assert predicted_utilization(relaxed, 25.0) == pytest.approx(0.5)  # generation-bound: T / (R/mu)


def test_an_uplink_slower_than_a_step_bounds_the_period_by_c_over_s():
    """The workers receive versions at least C / P apart and may use them at most S apart, so
    P >= C / S; below that bound the fluid latency term alone decides."""
    free = StepTimes(train_s=1.0, broadcast_s=3.0, rollouts_per_step=100, staleness=2, uplink_s=2.5)
    assert step_period(free, 200.0) == pytest.approx(4.5 / 3)  # C / S = 1.25 < latency / (S + 1) = 1.5
    bound = StepTimes(train_s=1.0, broadcast_s=3.0, rollouts_per_step=100, staleness=1, uplink_s=2.5)
    assert step_period(bound, 200.0) == pytest.approx(2.5)  # latency / (S + 1) = 2.25 < C / S
    assert max_utilization(bound) == pytest.approx(1.0 / 2.5)
    assert required_throughput(bound, 0.5) == math.inf  # no fleet beats the link: P >= 2.5 > 2.0
    assert required_throughput(bound, 0.4) < math.inf
    synchronous = StepTimes(train_s=1.0, broadcast_s=3.0, rollouts_per_step=100, staleness=0, uplink_s=2.5)
    assert step_period(synchronous, 200.0) == pytest.approx(4.5)  # S = 0: the latency term carries C


def test_a_saturated_star_runs_its_step_loop_on_the_uplinks_fetch_grid():
    """Two star workers fetching back to back start a fetch every C; S + 1 versions take the loop
    fetch (n C) + one worker's generation (n R / sum(mu)) + T_train, plus the mean wait C / 2 for
    the next fetch slot."""
    star = StepTimes(train_s=0.7, broadcast_s=4.0, rollouts_per_step=100, staleness=1, uplink_s=1.8, copies=2)
    # loop 3.6 + 2 * 0.5 + 0.7 = 5.3 s, + 0.9 s wait, for S + 1 = 2 versions
    assert step_period(star, 200.0) == pytest.approx((5.3 + 0.9) / 2)
    assert step_period(replace(star, copies=1), 200.0) == pytest.approx((0.7 + 4.0 + 0.5) / 2)  # a chain: fluid
    relaxed = replace(star, uplink_s=1.0)  # fetch 2.0 s < fluid period 2.6 s: not saturated, fluid
    assert step_period(relaxed, 200.0) == pytest.approx((0.7 + 4.0 + 0.5) / 2)
    long_link = replace(star, staleness=3, uplink_s=3.0)  # loop 2 * (3.0 + 0.5) + 0.7 + 1.5 = 9.2 s for 4 versions
    assert step_period(long_link, 200.0) == pytest.approx(9.2 / 4)
    assert step_period(replace(long_link, train_s=3.0), 200.0) == pytest.approx(3.0)  # T_train stays a floor


def test_a_saturated_stars_period_has_no_jump_where_its_loop_crosses_a_grid_step():
    """The rule it replaced rounded the loop up to whole copy-times: at S = 2 a learner step 0.02 s
    longer, taking the loop past 3 C, put 4 C / 3 in place of C (+33%). The period now grows with
    the loop by 1 / (S + 1)."""
    base = StepTimes(train_s=0.5, broadcast_s=3.0, rollouts_per_step=512, staleness=2, uplink_s=1.19, copies=2)
    periods = [step_period(replace(base, train_s=0.5 + i * 0.01), 1500.0) for i in range(8)]
    steps = [b - a for a, b in itertools.pairwise(periods)]
    assert all(step == pytest.approx(0.01 / 3) for step in steps), steps


def test_required_throughput_is_the_inverse_of_utilization():
    rng = random.Random(3)
    for _ in range(200):
        times = StepTimes(rng.uniform(0.1, 5), rng.uniform(0, 5), rng.randint(1, 1000), rng.randint(0, 4))
        target = rng.uniform(0.2, 1.0)
        need = required_throughput(times, target)
        if math.isinf(need):
            assert predicted_utilization(times, 1e12) < target + 1e-9
        else:
            assert predicted_utilization(times, need) >= target - 1e-9
            assert predicted_utilization(times, need * 0.99) < target


def test_provisioning_need_aims_for_the_knee_when_the_target_is_out_of_reach():
    rng = random.Random(5)
    for _ in range(200):
        times = StepTimes(rng.uniform(0.1, 5), rng.uniform(0, 5), rng.randint(1, 1000), rng.randint(0, 4))
        ceiling = max_utilization(times)
        assert predicted_utilization(times, 1e12) == pytest.approx(ceiling, rel=1e-6)
        available = rng.uniform(1, 5000)
        need = provisioning_need(times, available)
        if required_throughput(times) <= available:  # the target is reachable with this fleet: unchanged
            assert need == required_throughput(times)
        else:  # otherwise never more than what 95% of the ceiling takes, and that much is reached
            assert math.isfinite(need) and need <= required_throughput(times)
            assert predicted_utilization(times, need) >= 0.95 * ceiling - 1e-9
    # dissemination-bound: S T_train < T_bcast caps utilization at (S + 1) T / (T + Tb) = 0.5
    slow = StepTimes(train_s=1.0, broadcast_s=3.0, rollouts_per_step=100, staleness=1)
    assert max_utilization(slow) == pytest.approx(0.5) and required_throughput(slow) == math.inf
    assert provisioning_need(slow, available=1e6, headroom=1.1) == pytest.approx(100 / (2 / 0.475 - 4) * 1.1)


def test_invalid_times_are_rejected():
    with pytest.raises(ValueError):
        StepTimes(train_s=0.0, broadcast_s=1.0, rollouts_per_step=1, staleness=1)
    with pytest.raises(ValueError):
        required_throughput(StepTimes(1.0, 0.0, 1, 1), target_utilization=1.5)


def brute_force_cost(candidates, need):
    best = math.inf
    for size in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            if sum(c.throughput for c in subset) >= need:
                best = min(best, sum(c.price_per_hour for c in subset))
    return best


def test_activation_meets_the_rule_within_5_percent_of_brute_force():
    rng = random.Random(11)
    for trial in range(150):
        candidates = [Candidate(f"w{i}", round(rng.uniform(0.05, 3.0), 2), rng.uniform(1, 100))
                      for i in range(rng.randint(1, 11))]
        need = rng.uniform(0.05, 1.0) * sum(c.throughput for c in candidates)
        chosen = choose_active(candidates, need)
        assert chosen.meets_requirement and chosen.throughput >= need
        optimum = brute_force_cost(candidates, need)
        assert chosen.price_per_hour <= optimum * 1.05 + 1e-9, (trial, chosen, optimum)


def test_activation_prefers_cheap_capacity_and_reports_shortfall():
    fleet = [Candidate("premium", 4.0, 100.0), Candidate("cheap-a", 0.5, 30.0), Candidate("cheap-b", 0.5, 30.0)]
    assert choose_active(fleet, 55.0).active == ("cheap-a", "cheap-b")
    assert choose_active(fleet, 90.0).active == ("premium",)
    short = choose_active(fleet, 500.0)
    assert not short.meets_requirement and len(short.active) == 3
    assert choose_active(fleet, 0.0).active == ()


def test_broadcast_time_model():
    mib = 1024 * 1024
    assert broadcast_seconds(64 * mib, 8 * mib, [8 * mib] * 4, "star") == pytest.approx(32.0)
    chain = broadcast_seconds(64 * mib, 8 * mib, [8 * mib] * 4, "pipelined", chunk_bytes=mib)
    assert chain == pytest.approx((64 + 3) / 8)
    # the slowest *relaying* uplink limits the chain; the last worker's uplink does not matter
    assert broadcast_seconds(64 * mib, 8 * mib, [8 * mib, 4 * mib], "pipelined", mib) == pytest.approx(65 / 8)
    assert broadcast_seconds(64 * mib, 8 * mib, [], "star") == 0.0
    # a star serves requests first come first served, IN_FLIGHT chunks per fetch at a time: a payload of
    # one window goes to the workers one after another, one of many chunks to all of them near the end
    assert arrival_seconds(2 * mib, 8 * mib, [8 * mib] * 3, "star") == pytest.approx([0.25, 0.5, 0.75])
    assert arrival_seconds(64 * mib, 8 * mib, [8 * mib] * 2, "star") == pytest.approx([15.75, 16.0])
    assert inspect.signature(fetch_version).parameters["in_flight"].default == IN_FLIGHT


def test_sync_workers_start_the_batch_as_their_own_copy_arrives():
    # all at once: the arrival itself; a head start of the first worker shortens what the batch waits
    assert staggered_broadcast_s([1.0, 1.0], [100.0, 100.0], 200) == pytest.approx(1.0)
    # 0.9 s alone at 500/s makes 450 of 512; the rest at 1000/s: done at 1.862 = 1.35 + 512/1000
    assert staggered_broadcast_s([0.9, 1.8], [500.0, 500.0], 512) == pytest.approx(1.35)
    # the early worker finishes the whole batch before the late one holds the version
    assert staggered_broadcast_s([0.0, 10.0], [100.0, 100.0], 200) == pytest.approx(2.0 - 1.0)
    with pytest.raises(ValueError, match="one arrival time per worker"):
        staggered_broadcast_s([1.0], [1.0, 2.0], 10)
    # a sync star plan charges the staggered time, not the last arrival (S > 0 keeps the last arrival)
    mib = 1024 * 1024
    inventory = Inventory(learner=LearnerSpec(train_step_s=1.0, price_per_hour=1.0, payload_mib=2,
                                              upload_mbps=16),
                          workers=[WorkerClass(name="w", count=2, price_per_hour=0.1, rollouts_per_s=500.0)])
    last = max(arrival_seconds(2 * mib, 2e6, [math.inf] * 2, "star"))
    sync = provision(inventory, 512, 0, mode="star", activate=False)
    assert sync.broadcast_s < last and sync.step_s == pytest.approx(1.0 + sync.broadcast_s + 512 / 1000)
    assert provision(inventory, 512, 1, mode="star", activate=False).broadcast_s == pytest.approx(last)


def test_provision_and_plan_command(tmp_path, capsys):
    inventory = load_inventory("configs/inventory.example.yaml")
    relaxed = provision(inventory, rollouts_per_step=512, staleness=3)
    assert relaxed.utilization == pytest.approx(1.0) and relaxed.throughput >= relaxed.required
    assert set(relaxed.chosen) == {"rtx4090-community"}  # the cheapest rollouts per dollar suffice
    tight = provision(inventory, rollouts_per_step=512, staleness=0)
    assert tight.utilization < 0.5 and sum(tight.chosen.values()) == 16  # S=0: everything, still idle
    assert main(["plan", "--inventory", "configs/inventory.example.yaml", "staleness=3"]) == 0
    out = capsys.readouterr().out
    assert "predicted learner utilization 100.0%" in out and "centralized counterfactual" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner: {price_per_hour: 1, train_step_s: 1, upload_mbps: 1, payload_mib: 1}\n"
                   "workers: [{name: x, price_per_hour: 1, rollouts_per_s: -3}]\n")
    assert main(["plan", "--inventory", str(bad)]) == 2
    assert "workers.0.rollouts_per_s" in capsys.readouterr().err


def test_inventory_and_scenario_share_one_worker_class():
    from echo2.simulation.scenario import load_scenario

    scenario = load_scenario("configs/scenarios/qwen3-8b-256w-wan.yaml")
    inventory = scenario.inventory()
    for planned, declared in zip(inventory.workers, scenario.fleet, strict=True):
        assert isinstance(planned, WorkerClass)
        assert (planned.name, planned.count, planned.price_per_hour) == (declared.name, declared.count,
                                                                         declared.price_per_hour)
        # its leases drain: the long responses finish at single-sequence speed, below the full batch's rate
        assert 0.3 * declared.rollout_rate(2048) < planned.rollouts_per_s < declared.rollout_rate(2048)
    assert inventory.throughput(scenario.fleet[0]) == pytest.approx(681 / 2048 * (1 - 0.1 * 600 / 3600))
    # tokens/s need the inventory's response_tokens; an omitted uplink (learner or worker) is unlimited
    learner = {"price_per_hour": 1, "train_step_s": 10, "payload_mib": 100}
    with pytest.raises(ValueError, match="response_tokens"):
        Inventory.model_validate({"learner": learner, "workers": [{"name": "x", "tokens_per_s": 100}]})
    tokens = Inventory.model_validate({"learner": learner, "response_tokens": 50,
                                       "workers": [{"name": "x", "count": 4, "tokens_per_s": 100}]})
    assert tokens.throughput(tokens.workers[0]) == 2.0
    assert provision(tokens, rollouts_per_step=16, staleness=1).broadcast_s == 0.0


def test_plan_reads_a_scenario_with_its_length_distribution(capsys):
    """``echo2 plan --scenario``: the fleet at its lease rates, the engine-timed baseline, each
    class's price per token against the co-located learner's; the lengths are the user's to change."""
    from echo2.cli import main

    path = "configs/scenarios/qwen3-4b-64w-datacenter.yaml"
    assert main(["plan", "--scenario", path]) == 0
    shipped = capsys.readouterr().out
    assert "centralized co-located baseline" in shipped and "% at the cap" in shipped
    assert re.search(r"rtx4090-spot\s+[\d.]+\s+[\d.]+\s+[\d.]+", shipped)
    assert main(["plan", "--scenario", path, "workload.lengths.across_cv=0", "workload.lengths.within_cv=0"]) == 0
    even = capsys.readouterr().out
    share = [float(re.search(r"generating ([\d.]+)%", out).group(1)) for out in (shipped, even)]
    assert share[0] > share[1]  # the tails make the baseline generate longer
    assert "every response the mean" in even
    assert main(["plan", "--scenario", path, "workload.lengths.across_cv=-1"]) == 2
