"""An objective and a rollout engine of the user's own, named by import path from outside the
package (``learner.loss=module:name``, ``rollout.engine=module:Class``), train a real run end to
end; a path that names nothing, or the wrong kind of thing, fails with the key in the message."""

import json
import os

import pytest

from echo2.config import load_config
from echo2.config.base import ConfigError
from echo2.launch.train import run_training
from echo2.learner.objectives import resolve_objective
from echo2.protocol import RunSpec
from echo2.rollout.engines import load_engine

PLUGIN = '''
"""A user's own objective and engine, outside echo2."""
import os

from echo2.learner.objectives import Objective, token_mean_aggregate
from echo2.rollout.engines.hf import HfEngine

aggregated = []


def _halved(per_token, mask, totals):
    aggregated.append(int(mask.sum()))
    return 0.5 * token_mean_aggregate(per_token, mask, totals)


halved_token_mean = Objective(sequence_level=False, aggregate=_halved)


class NotAnEngine:
    def __init__(self, spec, eos_id, pad_id, device):
        pass


class CountingEngine(HfEngine):
    """The shipped engine, writing one line per generation batch where the test reads it."""

    def sample(self, sampler, prompt_ids, params, draws, finished=None, updates=None):
        with open(os.environ["EXTENSION_ENGINE_LOG"], "a") as log:
            log.write(f"{len(prompt_ids)}\\n")
        return super().sample(sampler, prompt_ids, params, draws)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """``user_plugin`` importable here and in the workers' processes."""
    (tmp_path / "user_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("EXTENSION_ENGINE_LOG", str(tmp_path / "engine.log"))
    import user_plugin

    yield user_plugin
    monkeypatch.delitem(__import__("sys").modules, "user_plugin", raising=False)


def test_an_objective_and_an_engine_from_outside_the_package_train_a_run(plugin, tmp_path):
    config = load_config(overrides=[
        f"run.dir={tmp_path}", "run.name=ext", "run.steps=4", "eval.size=10", "eval.every=10", "eval.show=0", "checkpoint.every=0",
        "telemetry.progress=false", "learner.groups_per_step=4", "rollout.groups_per_lease=2",
        "learner.loss=user_plugin:halved_token_mean", "rollout.engine=user_plugin:CountingEngine"])
    summary = run_training(config)
    assert summary.result.steps == 4
    assert plugin.aggregated and all(tokens > 0 for tokens in plugin.aggregated)  # the learner's loss was its
    batches = [int(line) for line in (tmp_path / "engine.log").read_text().split()]
    # the workers sampled with it: a lease of 2 groups, or of one while its worker is on trial
    assert batches and {rows for rows in batches} <= {config.rollout.group_size, 2 * config.rollout.group_size}
    resolved = json.loads(json.dumps(config.model_dump()))
    assert resolved["learner"]["loss"] == "user_plugin:halved_token_mean"


def test_a_path_that_names_nothing_or_the_wrong_thing_fails_with_its_key(plugin):
    with pytest.raises(ConfigError, match="learner.loss"):
        load_config(overrides=["learner.loss=no-such-objective"])
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config(overrides=["rollout.engine=vllm2"])
    with pytest.raises(ValueError, match="learner.loss='user_plugin:nothing'.*cannot import"):
        resolve_objective("user_plugin:nothing")
    with pytest.raises(ValueError, match="is a type, not an echo2.learner.objectives.Objective"):
        resolve_objective("user_plugin:CountingEngine")
    spec = RunSpec(model="m", dtype="float32", group_size=2, temperature=1.0, max_new_tokens=4, groups_per_lease=1,
                   protocol="async", staleness=1, fetch_delay_s=0.0, broadcast_stall_s=5.0, broadcast_timeout_s=30.0,
                   heartbeat_interval_s=1.0, seed=0, engine="user_plugin:halved_token_mean")
    with pytest.raises(TypeError, match="is a Objective, not an engine class"):
        load_engine(spec, eos_id=1, pad_id=0)
    with pytest.raises(TypeError, match="lacks max_context, sample, load, groups_that_fit"):
        load_engine(spec.model_copy(update={"engine": "user_plugin:NotAnEngine"}), eos_id=1, pad_id=0)
