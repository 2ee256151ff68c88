"""The reasoning_gym task: answer extraction, exact held-out scoring, optional partial and format
credit, a held-out split that never meets the training stream, and clear errors."""

import itertools
import json

import pytest
from reasoning_gym_support import CHAIN_SUM, chain_sum

from echo2.tasks import load_task


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
