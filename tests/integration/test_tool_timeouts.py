"""Tool calls: parsed in the chat templates' convention, run in a child process within a timeout
and resource limits, every failure returned to the model as text."""

from __future__ import annotations

import time

from tools_support import (
    runner,  # noqa: F401 (fixtures)
    )

from echo2.tasks.tools import ToolCall


def test_a_hanging_tool_is_cut_off_at_its_timeout_and_reported(runner):
    started = time.monotonic()
    result = runner.call(ToolCall("hangs", {}))
    assert not result.ok and result.outcome == "timeout"
    assert "did not finish within 1s" in result.text
    assert time.monotonic() - started < 5
    result = runner.call(ToolCall("spins", {}))  # busy, not sleeping: the same
    assert result.outcome in ("timeout", "killed") and not result.ok
