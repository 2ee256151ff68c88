"""Held-out evaluation off the learner's path (``eval.where: process``): an evaluator process
evaluates the versions the learner hands it while the learner keeps training (``after``: once
training is over)."""

import json
import os

import pytest

from echo2.config import load_config


@pytest.mark.parametrize("where", ["process", "after"])
def test_a_run_with_an_evaluator_process_logs_every_due_version_timed_at_its_publish(tmp_path, where):
    from echo2.launch.train import run_training

    cpus = sorted(os.sched_getaffinity(0))
    # after training the evaluator may take every core, and a benchmark may leave out the sampled reward
    after = [f"learner.cpus=[{cpus[0]}]", f"eval.cpus={cpus}", "eval.sampled=false"] if where == "after" else []
    config = load_config(overrides=[
        "run.steps=6", "eval.size=20", "eval.every=3", f"eval.where={where}", "learner.groups_per_step=8",
        "rollout.groups_per_lease=4", "workers.count=1", "telemetry.tensorboard=false", "telemetry.progress=false",
        f"run.dir={tmp_path}", "run.name=run", *after])
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
    log = (run_dir / "evals" / "evaluator.log").read_text()
    if where == "after":  # nothing was evaluated before the last step was trained, nor generated after
        assert min(r["eval_logged_time"] for r in evals.values()) >= steps[6]["time"]
        timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
        generated = [i["start"] for i in timeline if i["who"] != "learner"]
        assert generated and max(generated) < min(r["eval_logged_time"] for r in evals.values())
        assert f"threads on CPUs {cpus}" in log
        assert not any("eval_sampled_reward" in r for r in evals.values()) and summary.sampled_reward_after is None
    else:
        assert all("eval_sampled_reward" in r for r in evals.values())
    assert summary.accuracy_before == summary.result.evals[0][1].accuracy
    evals_dir = run_dir / "evals"
    assert not list(evals_dir.glob("*.safetensors")) and "held-out accuracy" in log
