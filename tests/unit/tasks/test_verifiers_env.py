"""An environment from the ecosystem: a verifiers taskset (built here, offline) whose tasks are the
prompts and whose reward functions score the replies on the coordinator, through real workers."""

from __future__ import annotations

import pytest

from echo2.tasks import load_task  # noqa: E402

pytest.importorskip("verifiers")


def test_a_multi_turn_verifiers_env_answers_each_turn_with_its_own_run():
    task = load_task("verifiers", {"taskset": "verifiers_retry"})  # by id: the package's own Taskset and Env
    assert task.max_turns == 3  # the seat's max_turns
    example = task.eval_examples(1)[0]
    a, rest = example.prompt.rstrip("=").split("+")
    b, c = rest.split("-")
    right = int(a) + int(b) - int(c)
    assert task.respond(example, [str(right - 5)]) == "+=" and task.respond(example, [str(right + 5)]) == "-="
    assert task.respond(example, [str(right - 5), "x"]) == "="
    assert task.respond(example, [str(right)]) is None  # solved: the env's run ends the episode
    assert task.respond(example, ["1", "2", "3"]) is None  # echo2 ends it at max_turns
    assert task.episode_reward(example, ["0", str(right)]) == 1.0 and task.episode_correct(example, ["0", str(right)])
    assert task.episode_reward(example, [str(right - 1)] * 3) == 0.0


def test_an_env_that_answers_differently_when_replayed_is_refused():
    task = load_task("verifiers", {"taskset": "verifiers_retry", "env": "verifiers_retry:CoinFlipEnv"})
    example = task.eval_examples(1)[0]
    with pytest.raises(ValueError, match="differently when played again"):
        for _ in range(20):  # 2 ** -19 that twenty plays agree
            task.respond(example, ["0"])


def test_multi_agent_envs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="2 agents"):
        assert load_task("verifiers", {"taskset": "verifiers_retry", "env": "user-sim"}).max_turns


def test_a_chat_models_turns_are_the_continuation_of_its_conversation(tmp_path):
    from chat_support import chat_tokenizer

    task = load_task("verifiers", {"taskset": "verifiers_retry", "chat_template": chat_tokenizer(tmp_path)})
    example = task.eval_examples(1)[0]
    assert example.prompt.startswith("<|im_start|>user\n") and example.prompt.endswith("<|im_start|>assistant\n")
    inserted = task.respond(example, ["0", "1"])
    # what follows the model's "1<|im_end|>": the env's feedback as a user turn, then the next assistant turn
    assert inserted in ("\n<|im_start|>user\n+=<|im_end|>\n<|im_start|>assistant\n",
                        "\n<|im_start|>user\n-=<|im_end|>\n<|im_start|>assistant\n")
