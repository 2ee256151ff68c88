"""A chat call's prompt ids keep the tokens the model sampled (``echo2.gateway.render``), on
SmolLM2's byte-level BPE tokenizer, where re-encoding a reply need not give its sampled ids."""

import os

import pytest

from echo2.gateway.render import Held, prompt_ids
from echo2.model.episodes import observation_ids
from echo2.model.sources import ModelSourceError, resolve_model_path
from echo2.tasks.chat import ChatPrompt

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    try:
        folder = resolve_model_path("smollm2-135m-instruct")
    except ModelSourceError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(error))
    return ChatPrompt(folder), AutoTokenizer.from_pretrained(folder)


def test_a_call_extending_an_answered_conversation_keeps_the_sampled_ids_and_encodes_only_what_is_new(smollm2):
    chat, tokenizer = smollm2

    def encode(text: str) -> list[int]:
        return observation_ids(tokenizer, text)

    first = [{"role": "user", "content": "Look up the code."}]
    prompt = prompt_ids(chat, encode, first, [])
    assert tokenizer.decode(prompt) == chat.render_messages(first)
    # the model wrote "Hello" as two tokens, which the text encodes as one: a re-encoding drifts
    sampled = tokenizer.convert_tokens_to_ids(["H", "ello"]) + [tokenizer.eos_token_id]
    assert encode("Hello") != sampled[:-1]
    answered = [*first, {"role": "assistant", "content": "Hello"}]
    held = [Held(answered, prompt + sampled, ended=True)]
    second = [*answered, {"role": "tool", "content": "4821"}]
    ids = prompt_ids(chat, encode, second, held)
    assert ids[: len(prompt + sampled)] == prompt + sampled  # what the model holds, id for id
    assert tokenizer.decode(ids) == chat.render_messages(second)  # and the conversation it was sent
    assert ids != encode(chat.render_messages(second))  # which a fresh encoding would not have kept
    # a reply cut off by its budget, or a history the agent rewrote, is rendered afresh
    cut = [Held(answered, prompt + sampled[:-1], ended=False)]
    assert prompt_ids(chat, encode, second, cut) == encode(chat.render_messages(second))
    rewritten = [first[0], {"role": "assistant", "content": "Hi"}, second[-1]]
    assert prompt_ids(chat, encode, rewritten, held) == encode(chat.render_messages(rewritten))
