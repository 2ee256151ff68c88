"""Every arm of bench/echo2_experiment.py is a valid run of the SmolLM2 recipe, as the arm means it."""

import sys
from pathlib import Path

import pytest

from echo2.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from experiment_arms import ARMS, overrides  # noqa: E402
from real_fidelity import SETTINGS  # noqa: E402


@pytest.mark.parametrize("arm", ARMS, ids=lambda arm: arm.name)
def test_every_arm_is_a_valid_config_of_the_recipe(arm):
    settings = overrides(arm, seed=1, minutes=12, eval_every=10, quick=False)
    assert settings[0] == "--config"
    config = load_config(settings[1], settings[2:])
    staleness = 0 if "protocol=sync" in arm.overrides else int(arm.name.split("-S")[1].split("-")[0])
    assert (config.staleness, config.eval.where, config.run.seed) == (staleness, "after", 1)
    assert config.workers.colocated == (not arm.lab) and config.learner.lora.enabled


@pytest.mark.parametrize("arm", [arm for arms in SETTINGS.values() for arm in arms], ids=lambda arm: arm.name)
def test_every_fidelity_setting_is_a_valid_config_of_the_recipe(arm):
    settings = overrides(arm, seed=0, minutes=60, eval_every=10, quick=False)
    config = load_config(settings[1], settings[2:])
    assert config.protocol == "async" and config.workers.count == 2 and config.workers.cpus == [1]
    if arm.name.startswith("S8-"):
        assert (config.staleness, config.learner.epochs, config.learner.minibatches) == (8, 4, 2)
        assert config.learner.correction == arm.name.removeprefix("S8-")
    else:
        assert config.staleness == 1 and config.learner.echoclip.step_delimiters == []
        assert config.learner.echoclip.enabled == arm.name.endswith("echoclip")
