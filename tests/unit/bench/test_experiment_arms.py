"""Every arm of bench/echo2_experiment.py is a valid run of the SmolLM2 recipe, as the arm means it."""


import pytest
from echo2_experiment import summarize  # noqa: E402
from experiment_arms import ARMS, overrides  # noqa: E402
from real_fidelity import PLACEMENT, SETTINGS  # noqa: E402
from real_fidelity import summarize as summarize_fidelity  # noqa: E402

from echo2.config import load_config


@pytest.mark.parametrize("arm", ARMS, ids=lambda arm: arm.name)
def test_every_arm_is_a_valid_config_of_the_recipe(arm):
    settings = overrides(arm, seed=1, minutes=12, eval_every=10, quick=False)
    assert settings[0] == "--config"
    config = load_config(settings[1], settings[2:])
    staleness = 0 if "protocol=sync" in arm.overrides else int(arm.name.split("-S")[1].split("-")[0])
    assert (config.staleness, config.eval.where, config.run.seed) == (staleness, "after", 1)
    assert config.emulation.colocated == (not arm.lab) and config.learner.lora.enabled


@pytest.mark.parametrize("arm", [arm for arms in SETTINGS.values() for arm in arms], ids=lambda arm: arm.name)
def test_every_fidelity_setting_is_a_valid_config_of_the_recipe(arm):
    settings = overrides(arm, seed=0, minutes=60, eval_every=10, quick=False)
    config = load_config(settings[1], [*settings[2:], *PLACEMENT["cpu"]])
    assert config.protocol == "async" and config.workers.count == 2 and config.workers.cpus == [1]
    on_gpu = load_config(settings[1], [*settings[2:], *PLACEMENT["cuda"]])
    assert (on_gpu.learner.device, on_gpu.workers.device) == ("cuda", "cuda")
    assert (on_gpu.learner.cpus, on_gpu.workers.cpus, on_gpu.eval.cpus) == (None, None, None)
    if arm.name.startswith("S8-"):
        assert (config.staleness, config.learner.epochs, config.learner.minibatches) == (8, 4, 2)
        assert config.learner.correction == arm.name.removeprefix("S8-")
    else:
        assert config.staleness == 1 and config.learner.echoclip.step_delimiters == []
        assert config.learner.echoclip.enabled == arm.name.endswith("echoclip")


def _run(arm: str, machine: str, seconds_to_half: float, versions_to_half: int = 10) -> dict:
    """A run whose curve is 0.1 until ``seconds_to_half``, then 0.5 (dollars = seconds / 100), evaluated
    at every ``versions_to_half`` versions of its 40, as the records made before they listed them."""
    points = [[t, t / 100, 0.1 if t < seconds_to_half else 0.5] for t in (0, seconds_to_half, 2 * seconds_to_half,
                                                                        3 * seconds_to_half, 4 * seconds_to_half)]
    run = {"arm": arm, "seed": 0, "machine": machine, "points": points, "acc_final": 0.5, "utilization": 0.5,
           "samples_per_s": 1.0, "dollars_per_hour": 1.0, "steps": 4 * versions_to_half,
           "train_wall_s": 4 * seconds_to_half}
    if versions_to_half != 10:
        run["eval_versions"] = [versions_to_half * i for i in range(5)]
    return run


def test_ratios_to_the_baseline_compare_runs_on_the_same_machine_only():
    """A machine twice as fast halves every arm's time: the ratio of an arm to the baseline must come
    out the same on both, not measure the machines against each other."""
    records = [_run("colocated", "fast", 100), _run("async-S2", "fast", 50),
               _run("colocated", "slow", 200), _run("async-S2", "slow", 100), _run("sync-S0", "slow", 400)]
    rows, target = summarize(records)
    by = {row["arm"]: row for row in rows}
    assert abs(target - 0.48) < 1e-9  # smoothed plateau 0.5, less 2 points
    # smoothed over 3 evaluations the curve first reaches 0.48 at the fourth point: 3x the switch time
    assert by["async-S2"]["time_vs_colocated"] == pytest.approx(0.5)
    assert by["async-S2"]["time_vs_colocated_ci"] == pytest.approx(0.0)
    assert by["async-S2"]["dollars_vs_colocated"] == pytest.approx(0.5)
    assert by["async-S2"]["time_vs_sync"] == pytest.approx(0.25)  # only the slow machine has a sync run
    assert by["sync-S0"]["time_vs_colocated"] == pytest.approx(2.0)
    assert by["sync-S0"]["time_vs_async_S2"] == pytest.approx(4.0)  # the star's column: against pipelined S = 2
    assert by["colocated"]["time_vs_async_S2"] == pytest.approx(2.0)  # 2.0 on either machine
    # every run reaches the target at its fourth evaluation, v30: all differ in pace, none in versions
    assert by["async-S2"]["versions_to_target"] == by["colocated"]["versions_to_target"] == 30
    assert by["async-S2"]["pace_vs_colocated"] == pytest.approx(0.5)


def test_time_to_the_target_splits_into_versions_and_pace():
    """An arm four times as fast per version that needs six times the versions takes 1.5x the time."""
    records = [_run("colocated", "m", 100, versions_to_half=10), _run("async-S2", "m", 150, versions_to_half=60)]
    by = {row["arm"]: row for row in summarize(records)[0]}
    assert (by["colocated"]["versions_to_target"], by["async-S2"]["versions_to_target"]) == (30, 180)
    assert by["async-S2"]["pace_vs_colocated"] == pytest.approx(0.25)  # 600 s / 240 versions vs 400 s / 40
    assert by["async-S2"]["time_vs_colocated"] == pytest.approx(1.5)


def test_a_fidelity_row_compares_its_settings_on_one_device_only():
    """A row's runs made on two devices are not pooled: the row shows its newest run's device, and
    the difference against the baseline pairs only runs of that device."""
    def run(arm: str, seed: int, acc: float, device: str, left_out: int = 0) -> dict:
        return {"row": "correction", "arm": arm, "seed": seed, "acc_final": acc, "acc_start": 0.16, "steps": 50,
                "staleness": {"8": 4}, "device": device, "implausible_rows": left_out, "trained_sequences": 200}

    gpu = "cuda (NVIDIA H200)"
    records = [run("S8-truncated", 0, 0.90, gpu),
               *(run(f"S8-{c}", seed, acc + seed / 100, "cpu", left_out + 20 * seed) for seed in (0, 1)
                 for c, acc, left_out in (("truncated", 0.30, 0), ("none", 0.20, 40)))]
    rows = {r["setting"]: r for r in summarize_fidelity(records)}
    assert {r["device"] for r in rows.values()} == {"cpu"}
    assert rows["S8-truncated"]["seeds"] == 2 and rows["S8-truncated"]["acc_final"] == pytest.approx(0.305)
    assert rows["S8-none"]["vs_baseline_points"] == pytest.approx(-10.0)
    # the rows left out, per run and as a share of the rows each run updated on (its own denominator)
    assert rows["S8-none"]["implausible_rows"] == pytest.approx(50)
    assert rows["S8-none"]["left_out_share"] == pytest.approx(0.25)
    assert rows["S8-truncated"]["left_out_share"] == pytest.approx(0.05)
    assert rows["S8-truncated"]["trained_sequences"] == pytest.approx(200)
