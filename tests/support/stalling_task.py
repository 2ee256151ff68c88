"""A task whose verifier stalls or fails on chosen answers, importable by the spawned scoring
processes of ``tests/integration/test_scoring_processes.py`` (``task.name=stalling_task:StallingArithmetic``)."""

import time
from pathlib import Path
from typing import Any

from echo2.tasks import ArithmeticTask, Example

#: Answers the verifier never finishes on (a sympy simplification that runs for minutes, say).
STALLS = "99"
#: Answers the verifier raises on.
FAILS = "88"


class StallingArithmetic(ArithmeticTask):
    def __init__(self, refuse_if: str | None = None, **options: Any) -> None:
        """``refuse_if``: a path whose existence makes building the task fail (a scoring process
        that cannot start again)."""
        if refuse_if is not None and Path(refuse_if).exists():
            raise MemoryError(f"cannot build the task: {refuse_if} exists")
        super().__init__(**options)

    def reward(self, example: Example, completion: str) -> float:
        if STALLS in completion:
            time.sleep(3600)
        if FAILS in completion:
            raise ArithmeticError(f"cannot verify {completion!r}")
        return super().reward(example, completion)

    def respond(self, example: Example, replies: list[str]) -> str | None:
        if STALLS in replies[-1]:
            time.sleep(3600)
        return "again"
