"""The reasoning_gym task: answer extraction, exact held-out scoring, optional partial and format
credit, a held-out split that never meets the training stream, and clear errors."""

import itertools
import json

import pytest
from reasoning_gym_support import chain_sum

from echo2.tasks import Example
from echo2.tasks.reasoning_gym import extract_answer


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
