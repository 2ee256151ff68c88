"""Episodes through the coordinator: the environment answers between turns, a submission's inserted
tokens must be those answers, each turn's version is recorded and staleness counts from the
oldest; the learner trains only the model's tokens; a multi-turn run end to end."""

from __future__ import annotations

from paths import REPO


def test_a_multi_turn_run_end_to_end(tmp_path):
    """The shipped multi-turn recipe, shortened: real workers ask the coordinator between turns,
    and every episode they submit passes the coordinator's check of its inserted tokens."""
    import json

    from echo2.config import load_config
    from echo2.launch.train import run_training

    recipe = REPO / "configs" / "retry-arithmetic.yaml"
    config = load_config(recipe, overrides=[f"run.dir={tmp_path}", "run.steps=4", "eval.every=2", "eval.size=60",
                                            "learner.groups_per_step=8", "telemetry.progress=false",
                                            "telemetry.tensorboard=false", "checkpoint.every=0"])
    summary = run_training(config)
    assert summary.reliability["groups_rejected"] == {} and summary.reliability["groups_accepted"] >= 32
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval_first_turn_accuracy" in r]
    assert len(evals) >= 2 and all(1.0 <= r["eval_turns"] <= 3.0 for r in evals)
    assert all(r["eval_accuracy"] >= r["eval_first_turn_accuracy"] for r in evals)
    assert "⟦" in (summary.run_dir / "train.log").read_text()  # whole episodes are shown at each eval
