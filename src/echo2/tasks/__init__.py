"""Tasks: prompt sources with verifiable rewards, and the loader that builds one from config."""

from __future__ import annotations

from typing import Any

from echo2.tasks.arithmetic import ArithmeticTask
from echo2.tasks.base import Example, Task, import_class
from echo2.tasks.calculator import CalculatorTask
from echo2.tasks.gsm8k import Gsm8kTask
from echo2.tasks.jsonl import JsonlTask
from echo2.tasks.reasoning_gym import ReasoningGymTask
from echo2.tasks.retry import RetryArithmeticTask
from echo2.tasks.verifiers_env import VerifiersTask

BUILTIN_TASKS: dict[str, type[Task]] = {"arithmetic": ArithmeticTask, "gsm8k": Gsm8kTask, "jsonl": JsonlTask,
                                         "reasoning_gym": ReasoningGymTask, "retry_arithmetic": RetryArithmeticTask,
                                         "calculator": CalculatorTask, "verifiers": VerifiersTask}

__all__ = ["ArithmeticTask", "BUILTIN_TASKS", "CalculatorTask", "Example", "Gsm8kTask", "JsonlTask", "ReasoningGymTask",
           "RetryArithmeticTask", "Task", "VerifiersTask", "load_task"]


def load_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """Build a task from a built-in name or a ``module:Class`` path, with keyword ``options``."""
    options = options or {}
    if name in BUILTIN_TASKS:
        task_class: type = BUILTIN_TASKS[name]
    elif ":" in name:
        task_class = import_class(name, Task, f"task.name={name!r}", "subclass of echo2.tasks.Task")
    else:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise ValueError(f"task.name={name!r}: unknown task (built-in: {known}; or give module:Class)")
    try:
        return task_class(**options)
    except TypeError as error:
        raise ValueError(f"task.options for {name!r}: {error}") from None
