"""Episodes: token continuity (the trained ids are the sampled and the inserted ids, the mask
covers exactly the model's tokens), per-turn versions, and the retry task's environment."""

from __future__ import annotations

import pytest

from echo2.model.draws import Draws
from echo2.model.episodes import run_episodes, segments
from echo2.model.sampling import Samples
from echo2.tasks import Example
from echo2.tasks.retry import RetryArithmeticTask

VOCAB = {str(d): 3 + d for d in range(10)} | {"+": 13, "-": 14, "=": 16}
EOS = 1


def encode(text: str) -> list[int]:
    return [VOCAB[c] for c in text]


def decode(ids: list[int]) -> str:
    back = {v: k for k, v in VOCAB.items()}
    return "".join(back[i] for i in ids if i != EOS)


class Scripted:
    """A 'model' that answers each row from a script, one answer per turn, with made-up log-probs;
    it records every context it was given."""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers, self.turn, self.contexts, self.draws = answers, 0, [], []

    def __call__(self, contexts: list[list[int]], draws: Draws | None = None) -> Samples:
        self.contexts.append([list(c) for c in contexts])
        self.draws.append(draws)
        rows = [a[self.turn] for a in self.answers[: len(contexts)]]
        self.turn += 1
        ids = [encode(r) + [EOS] for r in rows]
        return Samples(completion_ids=ids, logprobs=[[-0.1 * (k + 1)] * len(i) for k, i in enumerate(ids)])


def test_one_turn_is_a_single_sample_with_a_full_mask():
    model = Scripted([["7"], ["8"]])
    episodes = run_episodes([encode("3+4="), encode("3+4=")], sample=model, respond=lambda *_: pytest.fail(),
                            encode=encode, decode=decode, max_turns=1, version=lambda: 5)
    assert [e.token_ids for e in episodes] == [encode("7") + [EOS], encode("8") + [EOS]]
    assert all(e.mask == [1, 1] and e.turn_versions == [5] for e in episodes)


def test_tokens_are_kept_as_sampled_and_inserted_and_the_mask_marks_the_models():
    task = RetryArithmeticTask(max_turns=3)
    example = Example("3+4=", "7")
    model = Scripted([["5", "9", "7"]])
    versions = iter([3, 3, 4])
    swaps = []
    episode, = run_episodes(
        [encode(example.prompt)], sample=model, encode=encode, decode=decode, max_turns=3,
        respond=lambda rows, replies: [task.respond(example, r) for r in replies],
        version=lambda: next(versions), between_turns=lambda: swaps.append(1), draws=Draws([(7, 3)]))
    # each turn draws on from the model tokens before it: "5"+EOS, then "9"+EOS, each two tokens
    assert [(list(d.keys), list(d.offsets)) for d in model.draws] == [([(7, 3)], [0]), ([(7, 3)], [2]), ([(7, 3)], [4])]
    expected = encode("5") + [EOS] + encode("+=") + encode("9") + [EOS] + encode("-=") + encode("7") + [EOS]
    assert episode.token_ids == expected
    assert episode.mask == [1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
    assert [episode.token_ids[i] for i in range(10) if episode.mask[i]] == encode("5") + [EOS] + encode("9") + [EOS] + \
        encode("7") + [EOS]
    assert [lp for lp, m in zip(episode.logprobs, episode.mask) if not m] == [0.0] * 4
    # the model saw exactly the trained ids: each turn's context is the prompt plus every token before it
    assert model.contexts[2][0] == encode("3+4=") + expected[:8]
    assert episode.turn_versions == [3, 3, 4] and len(swaps) == 2
    assert episode.replies == ["5", "9", "7"] and episode.observations == ["+=", "-="]
    assert segments(episode.mask) == [(0, 2, 1), (2, 4, 0), (4, 6, 1), (6, 8, 0), (8, 10, 1)]
    assert task.episode_reward(example, episode.replies) == pytest.approx(0.49)
    assert task.episode_correct(example, episode.replies)


def test_episodes_end_where_the_environment_or_the_context_says():
    task = RetryArithmeticTask(max_turns=3)
    example = Example("3+4=", "7")
    model = Scripted([["1", "2", "3"], ["7", "x", "x"]])  # (a row that leaves must come last for the script)
    episodes = run_episodes([encode(example.prompt)] * 2, sample=model, encode=encode, decode=decode, max_turns=3,
                            respond=lambda rows, replies: [task.respond(example, r) for r in replies],
                            version=lambda: 0)
    assert episodes[1].turns == 1 and episodes[1].mask == [1, 1]  # solved at once: no feedback
    assert episodes[0].turns == 3 and episodes[0].observations == ["+=", "+="]
    assert [len(c) for c in model.contexts] == [2, 1, 1]  # finished rows leave the batch
    assert task.episode_reward(example, episodes[0].replies) == 0.0 and not task.episode_correct(example, ["1"])
    short = run_episodes([encode(example.prompt)], sample=Scripted([["1", "2"]]), encode=encode, decode=decode,
                         max_turns=2, respond=lambda rows, replies: ["+="], version=lambda: 0, max_context=8)
    assert short[0].turns == 1  # 4 + 2 + 2 tokens would reach the model's window


def test_a_turn_cut_off_before_its_end_of_turn_token_ends_the_episode():
    class Truncated(Scripted):
        def __call__(self, contexts, draws=None):
            samples = super().__call__(contexts, draws)
            return Samples([ids[:-1] for ids in samples.completion_ids], [lp[:-1] for lp in samples.logprobs])

    episodes = run_episodes([encode("3+4=")], sample=Truncated([["12", "7"]]), encode=encode, decode=decode,
                            max_turns=2, respond=lambda rows, replies: pytest.fail("asked after a cut-off turn"),
                            version=lambda: 0, eos_id=EOS)
    assert episodes[0].turns == 1 and episodes[0].token_ids == encode("12")


def test_retry_feedback():
    task = RetryArithmeticTask(max_turns=2)
    example = Example("10-3=", "7")
    assert task.respond(example, ["5"]) == "+=" and task.respond(example, ["9"]) == "-="
    assert task.respond(example, ["?"]) == "=" and task.respond(example, ["7"]) is None
    assert task.respond(example, ["5", "6"]) is None  # the last answer the episode allows
    with pytest.raises(ValueError, match="max_turns"):
        RetryArithmeticTask(max_turns=0)


def test_a_hidden_shift_is_fixed_per_prompt_spread_over_its_range_and_independent_of_the_split():
    from collections import Counter

    task = RetryArithmeticTask(max_turns=3, hidden_shift=1)
    plain = RetryArithmeticTask(max_turns=3)
    held_out = task.eval_examples(300)
    assert [e.prompt for e in held_out] == [e.prompt for e in plain.eval_examples(300)]
    shifts = Counter(int(e.answer) - int(p.answer) for e, p in zip(held_out, plain.eval_examples(300)))
    assert set(shifts) == {-1, 0, 1} and min(shifts.values()) > 60  # not tied to the held-out hash
    assert task.eval_examples(5) == held_out[:5]  # the same shift every time
