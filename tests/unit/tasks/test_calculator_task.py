"""A tool-using chat task: tool calls in the model's reply run in a child process, their results
come back as a ``tool`` message rendered with the model's chat template, token for token the
continuation of what the model holds."""

from __future__ import annotations

import pytest
from chat_support import chat_tokenizer
from transformers import AutoTokenizer

from echo2.tasks import load_task
from echo2.tasks.chat import ChatPrompt

CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "%s"}}</tool_call>'


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task("calculator", {"chat_template": chat_tokenizer(tmp_path_factory.mktemp("chatml")),
                                    "max_turns": 3, "tool_timeout_s": 2.0})


def test_a_tool_call_is_answered_with_a_tool_message_that_continues_the_conversation(task):
    example = task.eval_examples(1)[0]
    assert "What is" in example.prompt and example.prompt.endswith("<|im_start|>assistant\n")
    reply = CALL % "12*34"
    inserted = task.respond(example, [reply])
    assert inserted == "\n<|im_start|>tool\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    # what the model holds (prompt, its reply, its end-of-turn token) + the insertion == the whole conversation
    tokenizer = AutoTokenizer.from_pretrained(task.chat.template_source)
    conversation = [*task.chat.opening(task._question_of(example)), {"role": "assistant", "content": reply},
                    {"role": "tool", "content": "<tool_response>\n408\n</tool_response>"}]
    assert example.prompt + reply + "<|im_end|>" + inserted == \
        tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    second = task.respond(example, [reply, CALL % "408-1"])
    assert "<tool_response>\n407\n</tool_response>" in second


def test_tool_failures_are_told_to_the_model_and_a_plain_reply_ends_the_episode(task):
    example = task.eval_examples(1)[0]
    assert "error: ValueError: unsupported in a calculation" in task.respond(example, [CALL % "__import__('os')"])
    assert "error: tool call is not JSON" in task.respond(example, ["<tool_call>{oops</tool_call>"])
    assert task.respond(example, [f"The answer is {example.answer}."]) is None
    assert task.respond(example, [CALL % "1+1", CALL % "2+2", CALL % "3+3"]) is None  # the turn limit
    assert task.episode_reward(example, [CALL % "1+1", f"The answer is {example.answer}."]) == 1.0
    assert task.episode_reward(example, [f"{CALL % '1+1'} The answer is {example.answer}."]) == 0.0  # still calling


def test_a_template_that_rewrites_earlier_turns_cannot_continue_an_episode(tmp_path):
    last_only = ("{% for m in messages[-2:] %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    chat = ChatPrompt(chat_tokenizer(tmp_path, last_only))
    conversation = [*chat.opening("What is 1+1?"), {"role": "assistant", "content": CALL % "1+1"}]
    with pytest.raises(ValueError, match="rewrites earlier turns"):
        chat.continuation(conversation, [{"role": "tool", "content": "2"}])
