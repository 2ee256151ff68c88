"""Arithmetic with a calculator tool, for chat models: an episode in which the model may call a tool.

The user asks for the value of an expression (``417*38-95``); the system message describes one
tool, ``calculate(expression)``, in the Hermes convention that SmolLM2 and Qwen2.5 were tuned on.
A reply with ``<tool_call>`` blocks gets the tools' results back as a ``tool`` message (run by
:class:`~echo2.tasks.tools.ToolRunner`: a child process each, a timeout, memory and CPU limits; a
failure is reported to the model as text); a reply without one is the final answer, which is
right when its last integer is the value. Up to ``max_turns`` replies.

The environment runs on the coordinator (it holds the values), and is a function of the prompt
and the replies, so the tool messages of an episode can be rendered again for the check at
submission: results are cached per call, not recomputed.
"""

from __future__ import annotations

import json
import re

from echo2.tasks.arithmetic import ArithmeticTask
from echo2.tasks.base import Example
from echo2.tasks.chat import ChatPrompt
from echo2.tasks.tools import ToolCall, ToolRunner, calculate, parse_tool_calls

SYSTEM_PROMPT = """You are a helpful assistant with access to a calculator.
To use it, reply with a call in this exact form and nothing else:
<tool_call>{"name": "calculate", "arguments": {"expression": "12*34"}}</tool_call>
You will get the result in a tool message. When you know the answer, state it as: The answer is N."""


def last_integer(text: str) -> int | None:
    """The last integer in ``text`` (thousands separators allowed), or None."""
    found = re.findall(r"-?\d[\d,]*", text)
    try:
        return int(found[-1].replace(",", "")) if found else None
    except ValueError:
        return None


class CalculatorTask(ArithmeticTask):
    """:class:`ArithmeticTask` expressions asked in a chat, with a calculator tool, as episodes of
    up to ``max_turns`` replies. ``chat_template``: the model whose template renders the turns."""

    def __init__(self, chat_template: str, max_turns: int = 3, tool_timeout_s: float = 5.0,
                 system_prompt: str = SYSTEM_PROMPT, **arithmetic: object) -> None:
        arithmetic.setdefault("operators", "+-*")
        arithmetic.setdefault("max_operand", 999)
        super().__init__(**arithmetic)  # type: ignore[arg-type]
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.chat = ChatPrompt(chat_template, system_prompt)
        self.tools = ToolRunner({"calculate": calculate}, timeout_s=tool_timeout_s)
        self._results: dict[str, str] = {}
        """Each call's result, by the call as written (a scoring replay re-renders, never re-runs)."""

    def _question(self, example: Example) -> str:
        return f"What is {example.prompt.rstrip('=')}?"

    def _result(self, call: ToolCall | str) -> str:
        key = call if isinstance(call, str) else json.dumps([call.name, call.arguments], sort_keys=True)
        if key not in self._results:
            if len(self._results) > 65536:
                self._results.clear()
            self._results[key] = self.tools.call(call).text
        return self._results[key]

    def _tool_message(self, reply: str) -> dict[str, str] | None:
        calls = parse_tool_calls(reply)
        if not calls:
            return None
        results = [self._result(call) for call in calls]
        return {"role": "tool", "content": "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)}

    def train_examples(self, seed: int):
        for example in super().train_examples(seed):
            yield Example(self.chat.render(self._question(example)), example.answer)

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(self.chat.render(self._question(e)), e.answer) for e in super().eval_examples(n)]

    def respond(self, example: Example, replies: list[str]) -> str | None:
        if len(replies) >= self.max_turns or (message := self._tool_message(replies[-1])) is None:
            return None
        conversation = self.chat.opening(self._question_of(example))
        for reply in replies[:-1]:
            conversation += [{"role": "assistant", "content": reply}, self._tool_message(reply)]
        return self.chat.continuation([*conversation, {"role": "assistant", "content": replies[-1]}], [message])

    def _question_of(self, example: Example) -> str:
        """The user's question inside a rendered prompt."""
        found = re.search(r"What is [^?]*\?", example.prompt)
        if found is None:
            raise ValueError("not a prompt of this task")
        return found.group(0)

    def is_correct(self, example: Example, completion: str) -> bool:
        return not parse_tool_calls(completion) and last_integer(completion) == int(example.answer)

    def reward(self, example: Example, completion: str) -> float:
        return float(self.is_correct(example, completion))

    def display_prompt(self, example: Example) -> str:
        return self._question_of(example) + " "
