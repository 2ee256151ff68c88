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


def test_greedy_only_evaluation_plays_no_temperature_episode():
    from echo2.model.evaluation import evaluate
    from echo2.model.loading import SHIPPED_MODEL, load_model, load_tokenizer
    from echo2.tasks import load_task

    model, tokenizer, task = load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL), load_task("arithmetic")
    examples = task.eval_examples(8)
    both = evaluate(model, tokenizer, task, examples, max_new_tokens=8)
    greedy = evaluate(model, tokenizer, task, examples, max_new_tokens=8, sampled=False)
    assert greedy.accuracy == both.accuracy and greedy.greedy_tokens == both.greedy_tokens
    assert greedy.sampled_reward is None and both.sampled_reward is not None
    assert "eval_sampled_reward" not in greedy.metrics() and "eval_sampled_reward" in both.metrics()
