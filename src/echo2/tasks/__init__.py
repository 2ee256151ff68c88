"""Tasks: prompt sources with verifiable rewards, and the loader that builds one from config.

Tasks are loaded by name: importing this package imports none of them (some pull in a sandbox,
a dataset library or a chat template), only the one a run names, when it is built.

* ``base.py`` — the ``Task`` interface (single-turn tasks and environments); ``chat.py`` — prompts
  and environment turns rendered with a model's chat template;
* ``arithmetic.py`` (the default, and ``retry_arithmetic``'s feedback episodes), ``jsonl.py``,
  ``gsm8k.py``, ``reasoning_gym.py``, ``calculator.py`` (a chat task with a tool, ``tools.py``),
  ``retry.py`` (feedback turns);
* ``verifiers_env.py`` — a verifiers taskset and its env; ``verifiers_replay.py`` — the env's
  ``run`` replayed from the model's replies on the coordinator.
"""

from __future__ import annotations

import importlib
from typing import Any

from echo2.tasks.base import Example, Task, import_class

#: Built-in task names and the class each one names.
BUILTIN_TASKS: dict[str, str] = {
    "arithmetic": "echo2.tasks.arithmetic:ArithmeticTask", "gsm8k": "echo2.tasks.gsm8k:Gsm8kTask",
    "jsonl": "echo2.tasks.jsonl:JsonlTask", "reasoning_gym": "echo2.tasks.reasoning_gym:ReasoningGymTask",
    "retry_arithmetic": "echo2.tasks.retry:RetryArithmeticTask", "calculator": "echo2.tasks.calculator:CalculatorTask",
    "verifiers": "echo2.tasks.verifiers_env:VerifiersTask",
}
_CLASSES = {path.partition(":")[2]: path for path in BUILTIN_TASKS.values()}

__all__ = ["BUILTIN_TASKS", "Example", "Task", "load_task", *sorted(_CLASSES)]


def __getattr__(name: str) -> Any:
    """``from echo2.tasks import ArithmeticTask`` imports that task's module then, not before."""
    if name in _CLASSES:
        module_name, _, class_name = _CLASSES[name].partition(":")
        return getattr(importlib.import_module(module_name), class_name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """Build a task from a built-in name or a ``module:Class`` path, with keyword ``options``."""
    options = options or {}
    if name in BUILTIN_TASKS or ":" in name:
        path = BUILTIN_TASKS.get(name, name)
        task_class: type = import_class(path, Task, f"task.name={name!r}", "subclass of echo2.tasks.Task")
    else:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise ValueError(f"task.name={name!r}: unknown task (built-in: {known}; or give module:Class)")
    try:
        return task_class(**options)
    except TypeError as error:
        raise ValueError(f"task.options for {name!r}: {error}") from None
