"""The reasoning_gym task: answer extraction, exact held-out scoring, optional partial and format
credit, a held-out split that never meets the training stream, and clear errors."""

import itertools
import json

import pytest

from echo2.tasks import Example, load_task
from echo2.tasks.reasoning_gym import extract_answer

CHAIN_SUM = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


def chain_sum(**options) -> object:
    return load_task("reasoning_gym", {**CHAIN_SUM, **options})


def example_with_answer(task, answer: str) -> Example:
    """A held-out example whose reference answer is ``answer`` (found by scanning the split)."""
    for example in task.eval_examples(200):
        if json.loads(example.answer)["answer"] == answer:
            return example
    raise AssertionError(f"no held-out example with answer {answer}")


@pytest.mark.parametrize("completion, answer, well_formed", [
    ("42", "42", True),
    (" -7. ", "-7", True),
    ("The answer is 42.", "42", False),
    ("17 + 25 = 42", "42", False),
    ("1,234", "1,234", True),
    ("no digits here", None, False),
])
def test_last_number_extraction_and_format(completion, answer, well_formed):
    assert extract_answer(completion, "last_number") == (answer, well_formed)


def test_tag_and_whole_extraction():
    assert extract_answer("think... <answer>12</answer>", "tag") == ("12", True)
    assert extract_answer("12", "tag") == (None, False)
    assert extract_answer("  12 \n", "whole") == ("12", True)


def test_held_out_metric_is_exact_and_rewards_are_exact_unless_asked():
    task = chain_sum()
    example = example_with_answer(task, json.loads(task.eval_examples(1)[0].answer)["answer"])
    truth = json.loads(example.answer)["answer"]
    assert task.is_correct(example, f"The answer is {truth}.")
    assert task.is_correct(example, truth)
    assert not task.is_correct(example, f"{truth}1")
    assert task.reward(example, truth) == 1.0
    # chain_sum's scorer gives partial credit when the answer contains the truth among other text;
    # only partial_credit keeps it, and the held-out metric never does
    partial = chain_sum(partial_credit=True, answer_format="whole")
    wordy = f"it is {truth}"
    assert 0.0 < partial.reward(example, wordy) < 1.0
    assert not partial.is_correct(example, wordy)
    assert chain_sum(answer_format="whole").reward(example, wordy) == 0.0


def test_format_reward_is_a_bonus_for_well_formed_answers_only():
    task = chain_sum(format_reward=0.25)
    example = task.eval_examples(1)[0]
    truth = json.loads(example.answer)["answer"]
    assert task.reward(example, truth) == 1.25
    assert task.reward(example, f"The answer is {truth}.") == 1.0
    assert task.reward(example, "12345678") == 0.25
    assert task.is_well_formed("12345678") and not task.is_well_formed("it is 3")


@pytest.mark.integration
def test_held_out_split_never_meets_the_training_stream():
    task = chain_sum()
    held_out = task.eval_examples(400)
    assert len({e.prompt for e in held_out}) == 400  # distinct held-out questions
    for seed in (0, 1, 12345):
        training = {e.prompt for e in itertools.islice(task.train_examples(seed), 20_000)}
        assert len(training) > 5_000  # many distinct questions checked, not one
        assert training.isdisjoint(e.prompt for e in held_out)
    # the split is by question, so a second task object (a worker's) agrees on every question
    other = chain_sum()
    assert [e.prompt for e in other.eval_examples(400)] == [e.prompt for e in held_out]
    assert all(other.is_heldout(json.loads(e.answer)["question"]) for e in held_out)


def test_training_stream_is_deterministic_per_seed():
    task = chain_sum()
    first = [e.prompt for e in itertools.islice(task.train_examples(3), 50)]
    assert first == [e.prompt for e in itertools.islice(chain_sum().train_examples(3), 50)]
    assert first != [e.prompt for e in itertools.islice(task.train_examples(4), 50)]


def test_instruction_and_display_prompt():
    task = chain_sum(instruction="Reply with a number.")
    example = task.eval_examples(1)[0]
    question = json.loads(example.answer)["question"]
    assert example.prompt == f"{question}\nReply with a number."
    assert task.display_prompt(example) == question + " "


@pytest.mark.integration
def test_bad_options_fail_with_the_dataset_named():
    with pytest.raises(ValueError, match="chain_sum"):
        chain_sum(no_such_option=1)
    with pytest.raises(ValueError, match="not registered"):
        load_task("reasoning_gym", {"dataset": "no_such_dataset"})
    with pytest.raises(ValueError, match="answer_format"):
        chain_sum(answer_format="json")
    with pytest.raises(ValueError, match="fewer than"):
        load_task("reasoning_gym", {**CHAIN_SUM, "min_digits": 1, "max_digits": 1, "heldout_fraction": 0.01}
                  ).eval_examples(200)
