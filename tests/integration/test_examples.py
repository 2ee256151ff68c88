"""The one-screen example of the whole loop (examples/own_task.py) keeps working."""

import importlib

from paths import REPO

from echo2.config import load_config
from echo2.launch.train import run_training

EXAMPLE = REPO / "examples" / "own_task.py"


def test_the_examples_own_task_trains_over_real_workers_and_keeps_its_held_out_prompts_apart(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))  # task.name=module:Class imports it by name, here and
    module = importlib.import_module("own_task")  # in the coordinator's scoring processes
    task = module.TwoSums()
    held_out = {e.prompt for e in task.eval_examples(1000)}
    stream = task.train_examples(seed=0)
    assert not held_out & {next(stream).prompt for _ in range(2000)}
    assert task.reward(task.eval_examples(1)[0], "<think>10+10=20") == 1.0
    config = load_config(overrides=["task.name=own_task:TwoSums", "run.steps=2", "eval.every=2", "eval.size=20",
                                    "learner.groups_per_step=8", "rollout.groups_per_lease=4", f"run.dir={tmp_path}",
                                    "telemetry.progress=false", "telemetry.tensorboard=false"])
    summary = run_training(config)
    assert summary.result.steps == 2 and summary.workers_registered == 2
