"""Tools a model may call during an episode: parsed from its reply, run in a separate process with a
timeout and resource limits, and answered with text (the result, or what went wrong).

Calls are read in the convention most chat templates with tools use (Hermes / Qwen2.5 / SmolLM2):
``<tool_call>{"name": "calculate", "arguments": {"expression": "37*8"}}</tool_call>``, any number
per reply. A tool is a plain Python function of keyword arguments, importable by name (it runs
in a child process started by a ``forkserver``, so nothing of the learner's state, threads or
GPU is shared with it). The child sets ``RLIMIT_AS`` (memory) and ``RLIMIT_CPU`` before the
call; the parent kills it at ``timeout_s``. A failure — unknown tool, bad arguments, an
exception, a timeout, a memory or CPU limit — is not an error of the episode: the model is told
what happened, as text, and the episode goes on. Every outcome is counted (:class:`ToolStats`).
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import operator
import re
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    name: str
    ok: bool
    text: str
    """The result, or a one-line account of the failure (what the model is shown)."""
    outcome: str
    """``ok``, ``unknown_tool``, ``bad_call``, ``error``, ``timeout`` or ``killed`` (a resource limit)."""
    seconds: float


def parse_tool_calls(reply: str) -> list[ToolCall | str]:
    """Each ``<tool_call>`` of ``reply`` in order: a :class:`ToolCall`, or the reason it is not one."""
    calls: list[ToolCall | str] = []
    for body in _CALL.findall(reply):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as error:
            calls.append(f"tool call is not JSON ({error.msg})")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            calls.append('tool call needs {"name": ..., "arguments": {...}}')
            continue
        arguments = data.get("arguments", {})
        if not isinstance(arguments, dict):
            calls.append("tool call arguments must be an object")
            continue
        calls.append(ToolCall(data["name"], arguments))
    return calls


def _child(function: Callable[..., Any], arguments: dict[str, Any], memory_mb: int, cpu_s: int, pipe: Any) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    pipe.send(("started", ""))
    try:
        pipe.send(("ok", str(function(**arguments))))
    except MemoryError:
        pipe.send(("killed", f"ran out of memory (limit {memory_mb} MiB)"))
    except Exception as error:  # noqa: BLE001 - the model is told whatever the tool raised
        pipe.send(("error", f"{type(error).__name__}: {error}"))


#: Seconds a tool's child process may take to start before the call fails. Not part of the
#: tool's ``timeout_s``: on a loaded host a fresh process took over a second to start, and a
#: tool given one second was reported as timing out before its first line ran.
START_TIMEOUT_S = 30.0


@dataclass
class ToolStats:
    """Counts of tool outcomes and the time spent in tools (thread-safe)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, result: ToolResult) -> None:
        with self._lock:
            self.outcomes[result.outcome] += 1
            self.seconds += result.seconds


class ToolRunner:
    """Runs the tools of ``tools`` (name -> function) in a child process each, within limits."""

    def __init__(self, tools: dict[str, Callable[..., Any]], *, timeout_s: float = 5.0, memory_mb: int = 256,
                 max_result_chars: int = 2000) -> None:
        self.tools, self.timeout_s, self.memory_mb = tools, timeout_s, memory_mb
        self.max_result_chars = max_result_chars
        self.stats = ToolStats()
        self._context = multiprocessing.get_context("forkserver")

    def call(self, call: ToolCall | str) -> ToolResult:
        started = time.perf_counter()
        result = self._call(call, started)
        self.stats.add(result)
        return result

    def _call(self, call: ToolCall | str, started: float) -> ToolResult:
        def done(name: str, outcome: str, text: str) -> ToolResult:
            text = text if len(text) <= self.max_result_chars else text[: self.max_result_chars] + " [truncated]"
            return ToolResult(name, outcome == "ok", text, outcome, time.perf_counter() - started)

        if isinstance(call, str):
            return done("?", "bad_call", f"error: {call}")
        function = self.tools.get(call.name)
        if function is None:
            return done(call.name, "unknown_tool", f"error: no tool named {call.name!r} "
                                                   f"(tools: {', '.join(sorted(self.tools))})")
        receiver, sender = self._context.Pipe(duplex=False)
        child = self._context.Process(target=_child, daemon=True,
                                      args=(function, call.arguments, self.memory_mb,
                                            max(1, int(self.timeout_s) + 1), sender))
        child.start()
        sender.close()
        try:
            if not receiver.poll(START_TIMEOUT_S):
                return done(call.name, "timeout", f"error: {call.name} did not start within {START_TIMEOUT_S:g}s")
            receiver.recv()  # started: the tool's own time counts from here
            if receiver.poll(self.timeout_s):
                outcome, text = receiver.recv()
                return done(call.name, outcome, text if outcome == "ok" else f"error: {text}")
            if child.is_alive():
                return done(call.name, "timeout", f"error: {call.name} did not finish within {self.timeout_s:g}s")
            return done(call.name, "killed", f"error: {call.name} was killed (exit code {child.exitcode}), "
                                             f"probably by its resource limits")
        except EOFError:  # the child died without answering
            child.join(1.0)
            return done(call.name, "killed", f"error: {call.name} was killed (exit code {child.exitcode}), "
                                             f"probably by its resource limits")
        finally:
            receiver.close()
            if child.is_alive():
                child.kill()
            child.join(1.0)


# ---------------------------------------------------------------------- a shipped tool
_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def calculate(expression: str) -> str:
    """Evaluate an arithmetic ``expression`` (numbers, + - * / // %, parentheses; no names, no
    powers): the calculator tool. Integers stay exact; a division gives a float."""
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported in a calculation: {ast.unparse(node)[:40]!r}")

    result = value(ast.parse(expression, mode="eval").body)
    return str(int(result) if isinstance(result, float) and result.is_integer() else result)
