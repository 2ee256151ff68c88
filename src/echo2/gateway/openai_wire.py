"""The gateway's OpenAI shape: requests as echo2 reads them, answers as the ``openai`` SDK's own types.

A harness's call is read for what changes the sample (messages, tools, the token budget, stop
sequences) and refused, with a 400 naming the setting, where it asks for what the run cannot
honour: streaming, several choices, nucleus or penalised sampling, a temperature other than the
run's (the learner trains on the behaviour log-probs at ``rollout.temperature``). Settings that do
not change the sample (``metadata``, ``store``, ``parallel_tool_calls``, a ``user``) are accepted
and ignored.

Tools: a model whose chat template has a tool format of its own (it reads ``tools``: Qwen2.5's,
Hermes-style templates) gets the request's tool schemas through it, and its ``tool`` messages as
the template renders them. Any other model (SmolLM2's template has none) gets a documented text
format, the Hermes convention: the schemas described in the system message
(:data:`TOOLS_PREAMBLE`), tool results as ``tool`` messages wrapped in ``<tool_response>``. Either
way a reply's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the convention those
templates teach, :mod:`echo2.tasks.tools`) come back as the answer's ``tool_calls``. Every message
is reduced to its *canonical* text (role and content) before it is rendered or compared: an
assistant message with ``tool_calls`` becomes its content and the blocks the model wrote — the
model's reply as it wrote it, so the template renders it as the model's own text and the
conversation an agent sends back matches the one the gateway answered, whatever ids or spacing
the harness uses.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from openai.types import Completion, CompletionChoice, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageToolCall
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_tool_call import Function
from pydantic import BaseModel, ConfigDict

from echo2.tasks.tools import ToolCall, parse_tool_calls

Message = dict[str, str]

TOOLS_PREAMBLE = """You can call these tools:
<tools>
{tools}
</tools>
To call one, reply with <tool_call>{{"name": <tool name>, "arguments": <arguments as JSON>}}</tool_call>; its result comes back in a tool message."""

FinishReason = Literal["stop", "length", "tool_calls"]


class Refused(ValueError):
    """A call the gateway cannot serve as asked: a 400 naming why."""


class _Sampling(BaseModel):
    """What the sample depends on, common to both endpoints."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None

    def checked(self, run_temperature: float, max_new_tokens: int, budget: int | None = None) -> tuple[int, list[str]]:
        """The call's token budget and stop strings; :class:`Refused` for what the run cannot honour."""
        problems = [why for asked, why in (
            (self.stream, "stream=true (answers come whole)"),
            (self.n not in (None, 1), f"n={self.n} (one choice per call: send G calls, one per episode)"),
            (self.top_p not in (None, 1.0), f"top_p={self.top_p} (the run samples the whole distribution)"),
            (self.presence_penalty or self.frequency_penalty, "presence/frequency penalties"),
            (self.logit_bias, "logit_bias"),
            (self.temperature is not None and abs(self.temperature - run_temperature) > 1e-9,
             f"temperature={self.temperature} (this run samples at rollout.temperature={run_temperature}: the "
             f"learner trains on those log-probs; leave it unset)")) if asked]
        if problems:
            raise Refused(f"not served by this gateway: {'; '.join(problems)}")
        asked = budget if budget is not None else self.max_tokens
        if asked is not None and not 1 <= asked <= max_new_tokens:
            raise Refused(f"max_tokens={asked}: this run samples 1..{max_new_tokens} tokens per call "
                          f"(rollout.max_new_tokens)")
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return asked or max_new_tokens, stops


class ChatRequest(_Sampling):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_completion_tokens: int | None = None
    response_format: dict[str, Any] | None = None

    def conversation(self, template_tools: bool) -> tuple[list[Message], list[dict[str, Any]] | None]:
        """The canonical messages to render, and the tools for the template to describe
        (``template_tools``: it has a tool format; else they are described in the system message)."""
        if self.tool_choice not in (None, "auto", "none"):
            raise Refused(f"tool_choice={self.tool_choice!r}: the model decides (auto) or no tools are described (none)")
        if self.response_format not in (None, {"type": "text"}):
            raise Refused("response_format: only text (the model's own output is what is trained)")
        messages = [canonical(m, wrap_tool_results=not template_tools) for m in self.messages]
        if not messages:
            raise Refused("messages is empty")
        offered = self.tools if self.tools and self.tool_choice != "none" else None
        if offered and template_tools:
            return messages, offered
        if offered:
            described = TOOLS_PREAMBLE.format(tools="\n".join(json.dumps(t, sort_keys=True) for t in self.tools))
            if messages[0]["role"] == "system":
                messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{described}"}
            else:
                messages.insert(0, {"role": "system", "content": described})
        return messages, None

    def budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str
    echo: bool | None = None
    best_of: int | None = None
    suffix: str | None = None

    def check_text(self) -> None:
        if self.echo or self.best_of not in (None, 1) or self.suffix:
            raise Refused("not served by this gateway: echo, best_of, suffix")


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text",
                                                                                                  "output_text")]
        if len(parts) == len(content):
            return "".join(parts)
    raise Refused("message content must be text (a string or text parts): images and audio are not served")


def canonical(message: dict[str, Any], wrap_tool_results: bool = True) -> Message:
    """``message`` as role and text: the form the gateway renders and compares (see the module);
    ``wrap_tool_results``: a tool's result in ``<tool_response>`` (the text format's), else as it
    is (a template with a tool format wraps it its own way)."""
    role = message.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise Refused(f"message role {role!r}: expected system, developer, user, assistant or tool")
    text = _text(message.get("content"))
    if role == "assistant" and message.get("tool_calls"):
        blocks = []
        for call in _tool_calls(message["tool_calls"]):
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                raise Refused(f"tool call {call.get('id')!r}: arguments are not JSON") from None
            blocks.append(tool_call_text(ToolCall(str(function.get("name")), arguments)))
        text = "\n".join([text, *blocks]) if text else "\n".join(blocks)
    if role == "tool" and wrap_tool_results:
        text = f"<tool_response>\n{text}\n</tool_response>"
    return {"role": "system" if role == "developer" else role, "content": text}


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` as OpenAI's wire has them, or :class:`Refused`."""
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function") or {}, dict)
            and isinstance((c.get("function") or {}).get("arguments") or "{}", str) for c in calls):
        raise Refused("tool_calls must be a list of objects, each with a function object whose arguments are "
                      "JSON text ({\"function\": {\"name\": ..., \"arguments\": \"{...}\"}})")
    return calls


def tool_call_text(call: ToolCall) -> str:
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"


def reply_message(reply: str) -> tuple[ChatCompletionMessage, Message]:
    """The model's ``reply`` as the answer's message (its well-formed tool calls parsed out) and as
    the canonical message a harness will send back."""
    calls = [c for c in parse_tool_calls(reply) if isinstance(c, ToolCall)]
    if not calls:
        return ChatCompletionMessage(role="assistant", content=reply), {"role": "assistant", "content": reply}
    content = reply[: reply.index("<tool_call>")].strip()
    tool_calls = [ChatCompletionMessageToolCall(id=f"call_{uuid.uuid4().hex[:24]}", type="function",
                                                function=Function(name=c.name, arguments=json.dumps(c.arguments)))
                  for c in calls]
    message = ChatCompletionMessage(role="assistant", content=content or None, tool_calls=tool_calls)
    return message, canonical(message.model_dump(exclude_none=True))


def chat_completion(call_id: str, model: str, message: ChatCompletionMessage, stopped: bool, prompt_tokens: int,
                    completion_tokens: int) -> ChatCompletion:
    finish: FinishReason = "tool_calls" if message.tool_calls else "stop" if stopped else "length"
    return ChatCompletion(id=call_id, object="chat.completion", created=int(time.time()), model=model,
                          choices=[Choice(index=0, message=message, finish_reason=finish)],
                          usage=CompletionUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                                total_tokens=prompt_tokens + completion_tokens))


def text_completion(call_id: str, model: str, text: str, stopped: bool, prompt_tokens: int,
                    completion_tokens: int) -> Completion:
    return Completion(id=call_id, object="text_completion", created=int(time.time()), model=model,
                      choices=[CompletionChoice(index=0, text=text, finish_reason="stop" if stopped else "length")],
                      usage=CompletionUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                            total_tokens=prompt_tokens + completion_tokens))
