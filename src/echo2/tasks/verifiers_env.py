"""Environments from the ecosystem: a ``verifiers`` (v1) taskset as an echo2 task.

`verifiers <https://pypi.org/project/verifiers/>`_ splits an environment into a *taskset* (the
data: one typed task per row, with its prompt) and each task's *reward functions* (``@vf.reward``
methods, config-plugged rewards and metrics) that score a finished rollout's trace. echo2 uses
exactly those two halves: the taskset's tasks are the prompts, and the coordinator scores every
submitted reply by building the trace of the conversation (the task's prompt messages, then the
model's replies) and awaiting the task's own ``score``. So rewards are computed where the learner
trusts them, by the environment's code, and workers only ever see the prompt text.

``taskset`` is a registered taskset id (``verifiers`` loads it by id, as its CLI does) or
``module:Class`` naming a ``vf.Taskset`` subclass; ``options`` go to its config. The held-out set
is a hash slice of the task keys (``heldout_fraction``), the same on every machine. Prompts are
rendered with ``chat_template`` (a model whose chat template renders the task's messages; the
trained model, normally) or, without one, given as the task's plain prompt text.

Supported: finite tasksets whose tasks are answered in one reply and scored offline (reward
functions and metrics that need no runtime). Not supported (refused when loading, or skipped by
``verifiers`` itself when they need a runtime): toolsets (MCP tool servers), harnesses and
multi-agent environments, sandboxed runtimes, LLM judges, infinite tasksets.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from functools import cached_property
from typing import Any

from echo2.tasks.base import Example, Task, stable_fraction
from echo2.tasks.chat import ChatPrompt


def _verifiers() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise ImportError("task.name=verifiers needs the verifiers package: pip install 'echo2[verifiers]'") from None
    return vf


class VerifiersTask(Task):
    """A ``verifiers`` taskset's tasks as prompts, its reward functions as the verifier."""

    def __init__(self, taskset: str, options: dict[str, Any] | None = None, chat_template: str | None = None,
                 heldout_fraction: float = 0.1, success_reward: float = 1.0) -> None:
        if not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
        self.taskset_name, self.options = taskset, dict(options or {})
        self.chat = ChatPrompt(chat_template) if chat_template else None
        self.heldout_fraction, self.success_reward = heldout_fraction, success_reward

    @cached_property
    def _tasks(self) -> dict[str, Any]:
        """Every task of the taskset by key (loaded once, on first use)."""
        taskset = self._load_taskset()
        if getattr(taskset, "INFINITE", False):
            raise ValueError(f"taskset {self.taskset_name!r} is infinite; echo2 needs a finite one")
        tasks = {task.key: task for task in taskset}
        if not tasks:
            raise ValueError(f"taskset {self.taskset_name!r} has no tasks")
        first = next(iter(tasks.values()))  # a taskset yields one task type
        if type(first).toolsets(first.config):
            raise ValueError(f"taskset {self.taskset_name!r}: tasks with toolsets (tool servers) are not supported")
        return tasks

    def _load_taskset(self) -> Any:
        vf = _verifiers()
        if ":" not in self.taskset_name:
            from verifiers.v1.utils.loaders import load_taskset

            return load_taskset(vf.TasksetConfig(id=self.taskset_name, **self.options))
        module_name, _, class_name = self.taskset_name.partition(":")
        try:
            taskset_class = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"taskset {self.taskset_name!r}: cannot import it ({error})") from None
        if not (isinstance(taskset_class, type) and issubclass(taskset_class, vf.Taskset)):
            raise ValueError(f"taskset {self.taskset_name!r} is not a verifiers.v1 Taskset")
        from verifiers.v1.utils.generic import concrete_type

        config_class = concrete_type(taskset_class, vf.TasksetConfig) or vf.TasksetConfig
        return taskset_class(config_class(**self.options))

    # ------------------------------------------------------------------ prompts
    def _messages(self, task: Any) -> list[dict[str, str]]:
        data = task.data
        messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        if isinstance(data.prompt, str):
            return [*messages, {"role": "user", "content": data.prompt}]
        return [*messages, *({"role": m.role, "content": m.content} for m in data.prompt or [])]

    def _example(self, key: str, task: Any) -> Example:
        if self.chat is None:
            return Example(task.data.prompt_text, key)
        return Example(self.chat._tokenizer.apply_chat_template(self._messages(task), tokenize=False,
                                                                 add_generation_prompt=True), key)

    def _heldout(self, key: str) -> bool:
        return stable_fraction(key) < self.heldout_fraction

    def train_examples(self, seed: int) -> Iterator[Example]:
        import random

        keys = sorted(key for key in self._tasks if not self._heldout(key))
        if not keys:
            raise ValueError(f"taskset {self.taskset_name!r}: every task fell in the held-out slice")
        rng = random.Random(seed)
        while True:
            rng.shuffle(keys)
            yield from (self._example(key, self._tasks[key]) for key in keys)

    def eval_examples(self, n: int) -> list[Example]:
        keys = sorted(key for key in self._tasks if self._heldout(key))
        if len(keys) < n:
            raise ValueError(f"taskset {self.taskset_name!r} has {len(keys)} held-out tasks, fewer than {n}")
        return [self._example(key, self._tasks[key]) for key in keys[:n]]

    def display_prompt(self, example: Example) -> str:
        return self._tasks[example.answer].data.prompt_text + " "

    # ------------------------------------------------------------------ scoring
    def episode_reward(self, example: Example, replies: list[str]) -> float:
        """The task's own ``score`` on the trace of its prompt and ``replies`` (weighted reward sum)."""
        vf = _verifiers()
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        task = self._tasks[example.answer]
        kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
        nodes = [MessageNode(parent=i - 1 if i else None, message=kinds[m["role"]](content=m["content"]))
                 for i, m in enumerate(self._messages(task))]
        for reply in replies:
            nodes.append(MessageNode(parent=len(nodes) - 1, message=vf.AssistantMessage(content=reply), sampled=True))
        trace = vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                         agent=AgentInfo(config=AgentConfig()), nodes=nodes)
        asyncio.run(task.score(trace))
        return float(trace.reward)

    def reward(self, example: Example, completion: str) -> float:
        return self.episode_reward(example, [completion])

    def is_correct(self, example: Example, completion: str) -> bool:
        return self.reward(example, completion) >= self.success_reward
