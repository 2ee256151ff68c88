"""An environment from the ecosystem: a verifiers taskset (built here, offline) whose tasks are the
prompts and whose reward functions score the replies on the coordinator, through real workers."""

from __future__ import annotations

import json

import pytest

from echo2.tasks import load_task  # noqa: E402

pytest.importorskip("verifiers")

TASKSET = "verifiers_sums:SumTaskset"


def test_a_verifiers_taskset_gives_prompts_and_scores_replies_with_its_own_rewards():
    task = load_task("verifiers", {"taskset": TASKSET, "options": {"num_tasks": 200}})
    held_out = task.eval_examples(10)
    train = [next(iter_) for iter_ in [task.train_examples(0)] for _ in range(50)]
    assert {e.prompt for e in held_out}.isdisjoint(e.prompt for e in train)
    example = held_out[0]
    a, rest = example.prompt.rstrip("=").split("+")
    b, c = rest.split("-")
    right = str(int(a) + int(b) - int(c))
    assert task.reward(example, right) == 1.0 and task.reward(example, right + "1") == 0.0
    assert task.is_correct(example, right) and not task.is_correct(example, "x")
    assert "answer" not in example.prompt and example.answer not in example.prompt  # the key, never shown


def test_a_verifiers_environment_trains_through_echo2_workers(tmp_path):
    from echo2.config import load_config
    from echo2.launch.train import run_training

    config = load_config(overrides=[
        "task.name=verifiers", f"task.options={{taskset: '{TASKSET}'}}", f"run.dir={tmp_path}", "run.steps=3",
        "learner.groups_per_step=8", "eval.every=3", "eval.size=30", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0"])
    summary = run_training(config)
    assert summary.reliability["groups_rejected"] == {} and summary.reliability["groups_accepted"] >= 24
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "reward_mean" in r]
    assert len(trained) == 3 and 0.0 < trained[-1]["reward_mean"] <= 1.0  # the taskset's reward, from the coordinator
    assert summary.result.evals[-1][1].accuracy > 0.2  # the shipped model answers these sums


def test_a_multi_turn_verifiers_env_trains_through_echo2_workers(tmp_path):
    from echo2.config import load_config
    from echo2.launch.train import run_training

    config = load_config(overrides=[
        "task.name=verifiers", "task.options={taskset: verifiers_retry}", f"run.dir={tmp_path}", "run.steps=3",
        "learner.groups_per_step=8", "eval.every=3", "eval.size=30", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0"])
    summary = run_training(config)
    assert summary.reliability["groups_rejected"] == {} and summary.reliability["groups_accepted"] >= 24
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval_first_turn_accuracy" in r]
    assert evals and evals[-1]["eval_turns"] > 1.0  # the env answered: episodes went past one turn
    assert evals[-1]["eval_accuracy"] >= evals[-1]["eval_first_turn_accuracy"]  # success counts any turn
    log = (summary.run_dir / "train.log").read_text()
    assert "⟦+=⟧" in log or "⟦-=⟧" in log  # whole episodes, with the env's feedback, shown at the eval


def test_unsupported_tasksets_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot import"):
        load_task("verifiers", {"taskset": "no_such_module:Taskset"}).eval_examples(1)
    with pytest.raises(ValueError, match="not a verifiers.v1 Taskset"):
        load_task("verifiers", {"taskset": "verifiers_sums:SumData"}).eval_examples(1)

