"""Calibrate once, predict many: the figures a calibration keeps, and the predictions built from them."""

import json
import os
import subprocess
import sys

import pytest

from echo2.config import ConfigError, load_config
from echo2.model.loading import check_cpus, pin_cpus, pinned_cpus
from echo2.planning.calibration import Calibration, inventory_for, lease_rollouts_per_s
from echo2.planning.provision import provision
from echo2.simulation.calibrate import scenario_for
from echo2.simulation.engine import simulate
from echo2.simulation.predict import fluid_model_limit, predict_config


def calibration(**changes) -> Calibration:
    values = dict(source="run", model="echo2/tiny-arith", model_sha256="0" * 16, machine="x", protocol="async",
                  train_step_s=0.5,
                  train_step_cv=0.1, rollouts_per_s=1000.0, throughput_cv=0.1, lease_overhead_s=0.05, fetch_s=0.02,
                  dissemination_s=0.2, full_bytes=2e6, delta_bytes=1e6)
    return Calibration(**{**values, **changes})


def fleet_config(*overrides):
    return load_config(overrides=["workers.count=3", "emulation.fleet=[{throughput_factor: 0.5}, {throughput_factor: "
                                  "0.25, upload_mbps: 8, price_per_hour: 0.2}]", *overrides])


def test_a_worker_delivers_a_lease_per_generation_plus_overhead():
    config, cal = fleet_config(), calibration()
    lease = config.rollout.groups_per_lease * config.rollout.group_size  # 128
    assert lease_rollouts_per_s(config, cal, 0.5) == pytest.approx(lease / (lease / 500 + 0.05))
    inventory = inventory_for(config, cal)
    # fleet entries cycle over the workers: local-0 and local-2 at 0.5, local-1 at 0.25 with its own uplink and price
    assert [(c.count, round(c.rollouts_per_s, 3), c.upload_mbps, c.price_per_hour) for c in inventory.workers] == [
        (2, round(lease / (lease / 500 + 0.05), 3), None, 0.0), (1, round(lease / (lease / 250 + 0.05), 3), 8, 0.2)]
    assert inventory.learner.train_step_s == 0.5 and inventory.learner.fixed_broadcast_s == 0.2
    # a sync worker asks for the version before each lease: it finds a new one within a request, then fetches it
    assert inventory_for(fleet_config("protocol=sync"), cal).learner.fixed_broadcast_s == pytest.approx(0.02 + 0.025)
    assert inventory.learner.payload_mib * 2**20 == 1e6  # the default encoding ships deltas
    full = inventory_for(fleet_config("broadcast.encoding=full"), cal)
    assert full.learner.payload_mib * 2**20 == 2e6


def test_a_predicted_run_takes_the_calibrations_steps_up_to_its_own_length():
    # a step skips groups whose rewards all tie, and more tie as the policy learns: later steps are shorter
    cal = calibration(step_seconds=[0.8] * 7 + [0.4] * 10)
    assert cal.step_s(10) == pytest.approx(0.8)  # the first 10 - 3 (warm-up) steps
    assert cal.step_s(20) == pytest.approx((7 * 0.8 + 10 * 0.4) / 17)
    assert cal.step_s(1000) == cal.step_s(20)  # a longer run than the calibration: all of its steps
    assert calibration().step_s(10) == 0.5  # no per-step record: the mean
    assert inventory_for(fleet_config("run.steps=10"), cal).learner.train_step_s == pytest.approx(0.8)
    assert scenario_for(fleet_config("run.steps=20"), cal).learner.train_step_s == pytest.approx(cal.step_s(20))


def test_plan_predicts_the_configured_fleet_when_activation_is_off():
    cal = calibration(train_step_s=0.2)
    config = fleet_config("activation.enabled=false", "staleness=2")
    plan = provision(inventory_for(config, cal), 512, 2, activate=False)
    assert sum(plan.chosen.values()) == 3
    mu = 2 * lease_rollouts_per_s(config, cal, 0.5) + lease_rollouts_per_s(config, cal, 0.25)
    assert plan.throughput == pytest.approx(mu)
    # generation-bound: the step period is R / sum(mu), and the fixed dissemination cost is counted
    assert plan.step_s == pytest.approx(512 / mu) and plan.broadcast_s >= 0.2
    with pytest.raises(ConfigError, match="calibrate this model first"):
        inventory_for(config, calibration(model="other"))


def test_scenario_takes_the_config_and_the_measured_figures():
    config = fleet_config("protocol=sync", "run.steps=12")
    scenario = scenario_for(config, calibration())
    assert scenario.recipe is config  # the config itself, not a copy of its fields
    assert scenario.recipe.protocol == "sync" and scenario.recipe.run.steps == 12
    assert [w.rollouts_per_s for w in scenario.fleet] == [500, 250, 500]
    assert {w.rtt_ms for w in scenario.fleet} == {25.0} and {w.fetch_delay_s for w in scenario.fleet} == {0.02}
    assert scenario.fleet[1].upload_mbps == 8 and scenario.model.payload_bytes == pytest.approx(1e6)
    result = simulate(scenario, timeline_workers=0)
    assert 0 < result.utilization < 1 and result.train_wall_s > 12 * 0.5


def test_cpu_pins_apply_and_are_restored():
    before = os.sched_getaffinity(0)
    with pinned_cpus([min(before)]) as started_on:
        assert os.sched_getaffinity(0) == {min(before)} and started_on == sorted(before)
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match=r"CPUs \[4096\] are not available"):
        check_cpus([4096], "workers.cpus")
    # how local workers are pinned: in the child, before it runs the worker program
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                           preexec_fn=lambda: pin_cpus([max(before)]), capture_output=True, text=True, check=True)
    assert json.loads(child.stdout) == [max(before)]
    with pytest.raises(ConfigError, match="workers.cpus pins local worker processes"):
        load_config(overrides=["launcher=ray", "workers.cpus=[0]"])


def test_capped_relay_trees_and_stars_are_predicted_by_the_simulator_where_the_fluid_model_fails():
    """On a saturated relay chain of three the period is set by its head; the fluid model, charging
    the last worker's arrival, predicts far slower. A capped star with S >= 1 is simulated too. Two
    workers on a chain, S = 0, or unlimited links stay fluid."""
    cal = calibration(train_step_s=0.54, rollouts_per_s=1700.0, fetch_s=0.02, dissemination_s=0.3, full_bytes=1.8e6)
    capped = ["staleness=1", "workers.count=3", "emulation.fleet=[{throughput_factor: 0.3}]", "emulation.worker_upload_mbps=8",
              "emulation.learner_upload_mbps=8", "broadcast.encoding=full", "run.steps=40"]
    chain = load_config(overrides=capped)
    assert "relay chain of 3 workers" in fluid_model_limit(chain)
    assert "relay tree (fan-out 2)" in fluid_model_limit(load_config(overrides=[*capped, "broadcast.fan_out=2"]))
    assert "star of 3 workers" in fluid_model_limit(load_config(overrides=[*capped, "broadcast.mode=star"]))
    for fluid in (["workers.count=2"], ["staleness=0", "protocol=sync"], ["staleness=0", "protocol=sync",
                  "broadcast.mode=star"], ["broadcast.mode=star", "emulation.learner_upload_mbps=null"],
                  ["emulation.worker_upload_mbps=null", "emulation.learner_upload_mbps=null"]):
        assert fluid_model_limit(load_config(overrides=[*capped, *fluid])) is None, fluid
    def fluid_step_s(config):
        rollouts = config.learner.groups_per_step * config.rollout.group_size
        return provision(inventory_for(config, cal), rollouts, config.staleness, activate=False).step_s

    prediction = predict_config(chain, cal)
    assert prediction.method == "simulated" and prediction.step_s < 0.85 * fluid_step_s(chain)
    # the head alone keeps the learner at its uplink's bound: one version per C / S, C = M / B_L
    assert prediction.step_s == pytest.approx(1.8e6 / 1e6, rel=0.1)
    two = load_config(overrides=[*capped, "workers.count=2"])
    assert predict_config(two, cal).method == "fluid"
    assert predict_config(two, cal).step_s == pytest.approx(fluid_step_s(two))


def test_a_local_workers_core_share_follows_its_cpus_threads_and_speed():
    """The decode curve is timed on a core of its own; a prediction gives each local worker its share."""
    from echo2.planning.calibration import core_share

    assert core_share(load_config(overrides=["workers.count=2", "workers.cpus=[1]"])) == 0.5
    assert core_share(load_config(overrides=["workers.count=2", "workers.cpus=[1]",
                                             "emulation.fleet=[{throughput_factor: 0.25}]"])) == 1.0
    assert core_share(load_config(overrides=["workers.count=3", "workers.cpus=[0,1]"])) == pytest.approx(2 / 3)
    assert core_share(load_config(overrides=["emulation.colocated=true", "protocol=sync", "staleness=0"])) == 1.0
