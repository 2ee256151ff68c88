"""A chat call's prompt ids keep the tokens the model sampled (``echo2.gateway.render``), on
SmolLM2's byte-level BPE tokenizer, where re-encoding a reply need not give its sampled ids."""

import os

import pytest

from echo2.gateway.render import Held, prompt_ids
from echo2.model.episodes import observation_ids
from echo2.model.sources import ModelSourceError, resolve_model_path
from echo2.tasks.chat import ChatPrompt


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


#: A chat template with a tool format of its own (as Qwen2.5's): tools in a system block, a tool's
#: result in a user turn wrapped in <tool_response>.
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{%- for message in messages %}{%- if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n{% else %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}<|im_end|>\n{% endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def test_a_template_with_a_tool_format_describes_the_tools_itself_and_a_tool_turn_still_continues(smollm2, tmp_path):
    from transformers import AutoTokenizer

    from echo2.gateway.openai_wire import TOOLS_PREAMBLE, ChatRequest, reply_message

    plain, shared = smollm2
    tokenizer = AutoTokenizer.from_pretrained(shared.name_or_path)  # its own copy: the fixture's stays as it is
    tokenizer.chat_template = TOOL_TEMPLATE
    tokenizer.save_pretrained(tmp_path)
    tooled = ChatPrompt(str(tmp_path))
    assert tooled.renders_tools and not plain.renders_tools

    def encode(text: str) -> list[int]:
        return observation_ids(tokenizer, text)

    user = {"role": "user", "content": "What is the code?"}
    messages, tools = ChatRequest(messages=[user], tools=[TOOL]).conversation(tooled.renders_tools)
    assert messages == [user] and tools == [TOOL]  # no text preamble: the template's own format
    prompt = prompt_ids(tooled, encode, messages, [], tools)
    assert '<tools>\n{"type": "function"' in tokenizer.decode(prompt) and TOOLS_PREAMBLE[:20] not in tokenizer.decode(prompt)
    reply = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    message, said = reply_message(reply)
    assert message.tool_calls[0].function.name == "lookup"
    sampled = encode(reply) + [tokenizer.eos_token_id]
    held = [Held([*messages, said], prompt + sampled, True, tools)]
    sent_back = [user, message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "x", "content": "4821"}]
    second, same_tools = ChatRequest(messages=sent_back, tools=[TOOL]).conversation(tooled.renders_tools)
    ids = prompt_ids(tooled, encode, second, held, same_tools)
    assert ids[: len(prompt + sampled)] == prompt + sampled
    assert tokenizer.decode(ids[len(prompt + sampled):]) == "\n<|im_start|>user\n<tool_response>\n4821\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert prompt_ids(tooled, encode, second, held, None) != ids  # other tools: rendered afresh
