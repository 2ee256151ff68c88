"""Every arm of bench/echo2_experiment.py is a valid run of the SmolLM2 recipe, as the arm means it."""

import sys
from pathlib import Path

import pytest

from echo2.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from experiment_arms import ARMS, overrides  # noqa: E402


@pytest.mark.parametrize("arm", ARMS, ids=lambda arm: arm.name)
def test_every_arm_is_a_valid_config_of_the_recipe(arm):
    settings = overrides(arm, seed=1, minutes=12, eval_every=10, quick=False)
    assert settings[0] == "--config"
    config = load_config(settings[1], settings[2:])
    staleness = 0 if "protocol=sync" in arm.overrides else int(arm.name.split("-S")[1].split("-")[0])
    assert (config.staleness, config.eval.where, config.run.seed) == (staleness, "after", 1)
    assert config.workers.colocated == (not arm.lab) and config.learner.lora.enabled
