"""An agent's calls joined into training sequences by their tokens (``echo2.gateway.trajectory``)."""

import pytest

from echo2.gateway.trajectory import Call, Trajectory


def call(name: str, prompt: list[int], completion: list[int], version: int = 0) -> Call:
    return Call(name, prompt, completion, [-0.5] * len(completion), version)


def test_three_turns_with_tool_results_between_them_are_one_sequence_of_the_sampled_ids():
    trajectory = Trajectory()
    trajectory.add(call("a", [1, 2], [10, 11]))
    trajectory.add(call("b", [1, 2, 10, 11, 90, 91], [12], version=1))  # a tool's result, then the model
    segment = trajectory.add(call("c", [1, 2, 10, 11, 90, 91, 12, 92], [13, 14], version=2))
    assert len(trajectory.segments) == 1 and segment.calls == ["a", "b", "c"]
    episode = segment.episode
    assert segment.prompt_ids == [1, 2] and episode.token_ids == [10, 11, 90, 91, 12, 92, 13, 14]
    assert episode.mask == [1, 1, 0, 0, 1, 0, 1, 1] and episode.turn_versions == [0, 1, 2]
    assert episode.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5, 0.0, -0.5, -0.5]


def test_a_retried_call_replaces_the_turn_it_retries_and_what_followed_it():
    trajectory = Trajectory()
    trajectory.add(call("a", [1, 2], [10]))
    trajectory.add(call("b", [1, 2, 10, 90], [11, 12]))
    trajectory.add(call("c", [1, 2, 10, 90, 11, 12, 91], [13]))
    segment = trajectory.add(call("b2", [1, 2, 10, 90], [14]))  # b's turn again (its answer was lost)
    assert trajectory.abandoned == ["b", "c"] and segment.calls == ["a", "b2"]
    assert segment.episode.token_ids == [10, 90, 14] and segment.episode.mask == [1, 0, 1]
    again = trajectory.add(call("a2", [1, 2], [15]))  # the first turn retried: nothing of it is left
    assert again is segment and segment.calls == ["a2"] and segment.episode.token_ids == [15]
    assert trajectory.abandoned == ["b", "c", "a", "b2"] and len(trajectory.segments) == 1


def test_a_rewritten_history_starts_a_segment_of_its_own():
    trajectory = Trajectory()
    trajectory.add(call("a", [1, 2], [10, 11]))
    # the agent re-encoded the model's reply as other ids (or summarised it): not the sampled tokens
    summary = trajectory.add(call("b", [1, 2, 10, 77, 90], [12]))
    assert len(trajectory.segments) == 2 and summary.prompt_ids == [1, 2, 10, 77, 90]
    assert summary.episode.token_ids == [12] and summary.episode.mask == [1]
    # a call extending the first segment still joins it, not the newer one
    first = trajectory.add(call("c", [1, 2, 10, 11, 91], [13]))
    assert first is trajectory.segments[0] and first.calls == ["a", "c"] and not trajectory.abandoned


def test_a_call_whose_log_probs_do_not_match_its_tokens_is_refused():
    with pytest.raises(ValueError, match="1 log-probs for 2 completion tokens"):
        Trajectory().add(Call("a", [1], [2, 3], [-0.1], 0))
