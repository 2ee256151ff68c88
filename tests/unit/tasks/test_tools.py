"""Tool calls: parsed in the chat templates' convention, run in a child process within a timeout
and resource limits, every failure returned to the model as text."""

from __future__ import annotations

import pytest
from tools_support import (
    runner,  # noqa: F401 (fixtures)
)

from echo2.tasks.tools import ToolCall, calculate, parse_tool_calls


def test_tool_calls_are_parsed_in_order_and_bad_ones_say_why():
    reply = ('first <tool_call>{"name": "calculate", "arguments": {"expression": "37*8"}}</tool_call> then '
             '<tool_call>not json</tool_call><tool_call>{"arguments": {}}</tool_call>'
             '<tool_call>{"name": "x", "arguments": [1]}</tool_call>')
    calls = parse_tool_calls(reply)
    assert calls[0] == ToolCall("calculate", {"expression": "37*8"})
    assert "not JSON" in calls[1] and "name" in calls[2] and "object" in calls[3]
    assert parse_tool_calls("no tools here") == []


def test_calculator_is_exact_and_refuses_anything_but_arithmetic():
    assert calculate("37*8-(5+1)") == "290" and calculate("7/2") == "3.5" and calculate("-3//2") == "-2"
    for bad in ("__import__('os')", "2**1000000", "x+1", "[1]"):
        with pytest.raises(ValueError):
            calculate(bad)


def test_a_tool_runs_in_a_child_and_its_result_comes_back(runner):
    result = runner.call(ToolCall("calculate", {"expression": "12+30"}))
    assert result.ok and result.text == "42" and result.outcome == "ok"


def test_a_raising_tool_or_a_bad_call_is_told_to_the_model(runner):
    result = runner.call(ToolCall("raises", {"message": "division by zero in step 3"}))
    assert result.outcome == "error" and result.text == "error: RuntimeError: division by zero in step 3"
    assert runner.call(ToolCall("raises", {"wrong": 1})).text.startswith("error: TypeError")
    assert "no tool named 'rm'" in runner.call(ToolCall("rm", {})).text
    assert runner.call("tool call is not JSON (x)").outcome == "bad_call"


def test_a_tool_over_its_memory_limit_is_stopped(runner):
    result = runner.call(ToolCall("hoards", {}))
    assert not result.ok and result.outcome == "killed" and "memory" in result.text


def test_outcomes_are_counted(runner):
    before = runner.stats.outcomes["ok"]
    runner.call(ToolCall("calculate", {"expression": "1+1"}))
    assert runner.stats.outcomes["ok"] == before + 1 and runner.stats.seconds > 0
