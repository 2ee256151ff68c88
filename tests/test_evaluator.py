"""Held-out evaluation off the learner's path (``eval.where: process``): an evaluator process
evaluates the versions the learner hands it while the learner keeps training (``after``: once
training is over)."""

import json

import pytest

from echo2.config import load_config
from echo2.learner.evaluations import result_from_json, result_to_json
from echo2.model.evaluation import EvalResult


def test_an_evaluation_survives_its_trip_through_json():
    result = EvalResult(0.5, 0.25, [("1+1=", "2", 1.0)], well_formed=0.9, well_formed_accuracy=0.6,
                        greedy_tokens=3.5)
    assert result_from_json(json.loads(json.dumps(result_to_json(result)))) == result


def test_the_evaluator_is_a_config_switch_and_the_learner_evaluates_by_default():
    assert load_config().eval.where == "learner"
    assert load_config(overrides=["eval.where=process", "eval.threads=2"]).eval.threads == 2
    assert load_config(overrides=["eval.where=after"]).eval.where == "after"
    with pytest.raises(Exception, match="eval.where"):
        load_config(overrides=["eval.where=worker"])


@pytest.mark.integration
@pytest.mark.parametrize("where", ["process", "after"])
def test_a_run_with_an_evaluator_process_logs_every_due_version_timed_at_its_publish(tmp_path, where):
    from echo2.launch.train import run_training

    config = load_config(overrides=[
        "run.steps=6", "eval.size=20", "eval.every=3", f"eval.where={where}", "learner.groups_per_step=8",
        "rollout.groups_per_lease=4", "workers.count=1", "telemetry.tensorboard=false", "telemetry.progress=false",
        f"run.dir={tmp_path}", "run.name=run"])
    summary = run_training(config)
    run_dir = summary.run_dir
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = {r["version"]: r for r in records if "eval_accuracy" in r}
    assert sorted(evals) == [0, 3, 6] and [v for v, _ in summary.result.evals] == [0, 3, 6]
    steps = {r["version"]: r for r in records if "reward_mean" in r}
    assert not any("eval_accuracy" in r for r in steps.values())  # the learner did not evaluate between steps
    for version in (3, 6):  # timed at the publish, logged when the evaluator was done
        assert evals[version]["time"] <= steps[version]["time"] + 1.0
        assert evals[version]["eval_logged_time"] >= evals[version]["time"]
    if where == "after":  # nothing was evaluated before the last step was trained
        assert min(r["eval_logged_time"] for r in evals.values()) >= steps[6]["time"]
    assert summary.accuracy_before == summary.result.evals[0][1].accuracy
    evals_dir = run_dir / "evals"
    assert not list(evals_dir.glob("*.safetensors")) and "held-out accuracy" in (evals_dir / "evaluator.log").read_text()
