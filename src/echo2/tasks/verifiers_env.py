"""Environments from the ecosystem: a ``verifiers`` (v1) taskset and its environment as an echo2 task.

`verifiers <https://pypi.org/project/verifiers/>`_ splits an environment into a *taskset* (the
data: one typed task per row, with its prompt and its ``@vf.reward`` functions) and an *env*
(``vf.Env``: how one task becomes an episode; a plain taskset's is one reply to the prompt). echo2
uses both as written: the taskset's tasks are the prompts, the env's ``run`` — its own control
flow, a game engine stepping or feedback — answers each model turn, and the rewards are what
``run`` records plus the task's own ``score``. All of it runs on the coordinator, where the learner
trusts it; workers only sample the model's turns (:mod:`echo2.tasks.verifiers_replay` plays the
env's episode from the replies so far).

``taskset`` is a verifiers taskset id (a package exporting its ``Taskset`` and, for a multi-turn
environment, its ``Env`` via ``__all__``, loaded as verifiers' CLI loads it) or ``module:Class``
naming a ``vf.Taskset`` subclass; ``options`` go to its config. ``env`` names an environment
explicitly (an id or ``module:Class``; default: the taskset's own, else the single-reply one),
``env_options`` go to its config. ``max_turns`` caps an episode's model turns (default: the
seat's own ``max_turns``, else 4). The held-out set is a hash slice of the task keys
(``heldout_fraction``). Messages are rendered with ``chat_template`` (normally the trained
model) or, without one, inserted as their plain text.

Supported: finite, text-only tasksets; environments with one seat and one interaction per
episode whose ``run`` is a function of the task and the replies (checked on every replay);
reward functions and metrics that need no runtime. Refused when loading: toolsets (MCP tool
servers), multi-agent environments, an env's cross-agent ``finalize``, infinite tasksets.
Never run: harnesses, sandboxed runtimes, LLM judges (skipped by verifiers' offline scoring).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

from echo2.tasks.base import Example, Task, import_class, stable_fraction
from echo2.tasks.chat import ChatPrompt
from echo2.tasks.verifiers_replay import Message, Played, play


def _verifiers() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise ImportError("task.name=verifiers needs the verifiers package: pip install 'echo2[verifiers]'") from None
    return vf


def _import_class(name: str, base: type, what: str) -> type:
    return import_class(name, base, f"{what} {name!r}", f"verifiers.v1 {base.__name__}")


class VerifiersTask(Task):
    """A ``verifiers`` taskset's tasks as prompts, its env as the environment, its rewards as the verifier."""

    def __init__(self, taskset: str, options: dict[str, Any] | None = None, env: str | None = None,
                 env_options: dict[str, Any] | None = None, max_turns: int | None = None,
                 chat_template: str | None = None, heldout_fraction: float = 0.1,
                 success_reward: float = 1.0) -> None:
        if not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.taskset_name, self.options = taskset, dict(options or {})
        self.env_name, self.env_options, self._max_turns = env, dict(env_options or {}), max_turns
        self.chat = ChatPrompt(chat_template) if chat_template else None
        self.heldout_fraction, self.success_reward = heldout_fraction, success_reward
        self._said: dict[tuple[str, tuple[str, ...]], list[Message]] = {}
        """What the environment sent before each turn, by (task key, replies before it): every
        replay must send the same, or the rewards would score another conversation."""

    # ------------------------------------------------------------------ loading
    @cached_property
    def _tasks(self) -> dict[str, Any]:
        """Every task of the taskset by key (loaded once, on first use)."""
        taskset = self._taskset
        if getattr(taskset, "INFINITE", False):
            raise ValueError(f"taskset {self.taskset_name!r} is infinite; echo2 needs a finite one")
        tasks = {task.key: task for task in taskset}
        if not tasks:
            raise ValueError(f"taskset {self.taskset_name!r} has no tasks")
        first = next(iter(tasks.values()))  # a taskset yields one task type
        if type(first).toolsets(first.config):
            raise ValueError(f"taskset {self.taskset_name!r}: tasks with toolsets (tool servers) are not supported")
        return tasks

    @cached_property
    def _taskset(self) -> Any:
        vf = _verifiers()
        if ":" not in self.taskset_name:
            from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

            return load_taskset(taskset_config_type(self.taskset_name)(id=self.taskset_name, **self.options))
        from verifiers.v1.utils.generic import concrete_type

        taskset_class = _import_class(self.taskset_name, vf.Taskset, "taskset")
        return taskset_class((concrete_type(taskset_class, vf.TasksetConfig) or vf.TasksetConfig)(**self.options))

    @cached_property
    def _env(self) -> tuple[Any, str]:
        """The environment and its one seat's name. echo2 plays the env's ``setup`` and ``run``
        itself, so the env is built without what ``Env.__init__`` adds for reaching a model
        (harnesses, runtimes, interception): echo2's workers are that."""
        vf = _verifiers()
        from verifiers.v1.configs.agent import agent_config_fields
        from verifiers.v1.utils.generic import concrete_type
        from verifiers.v1.utils.loaders import environment_class

        if self.env_name and ":" in self.env_name:
            env_class = _import_class(self.env_name, vf.Env, "env")
        else:
            env_class = environment_class("" if ":" in self.taskset_name else self.taskset_name, self.env_name or "")
        config = (concrete_type(env_class, vf.EnvConfig, origin=vf.Env) or vf.EnvConfig)(**self.env_options)
        seats = list(agent_config_fields(config))
        if len(seats) != 1:
            raise ValueError(f"env {env_class.__name__} has {len(seats)} agents ({seats}); echo2 trains one policy "
                             "in one seat and supports single-agent environments only")
        if env_class.finalize is not vf.Env.finalize:
            raise ValueError(f"env {env_class.__name__} judges across agents in finalize(), which echo2 does not run")
        env = env_class.__new__(env_class)
        env.config, env.taskset = config, self._taskset
        return env, seats[0]

    @cached_property
    def max_turns(self) -> int:  # type: ignore[override]
        env, seat = self._env
        if type(env).__name__ == "SingleAgentEnv":
            return 1
        return self._max_turns or getattr(env.config, seat).max_turns or 4

    # ------------------------------------------------------------------ episodes
    def _play(self, example: Example, replies: list[str], until_out_of_replies: bool) -> Played:
        env, seat = self._env
        played = play(env, seat, self._tasks[example.answer], replies, until_out_of_replies)
        for turn, said in enumerate(played.observations):
            known = self._said.setdefault((example.answer, tuple(replies[:turn])), said)
            if known != said:
                raise ValueError(f"env {type(env).__name__} answered turn {turn} of task {example.answer!r} "
                                 f"differently when played again ({known!r}, then {said!r}); echo2 needs an env whose "
                                 "run is a function of the task and the replies (seed it per task)")
        if len(self._said) > 65536:
            self._said.clear()
        return played

    def _example(self, key: str) -> Example:
        example = Example("", key)
        played = self._play(example, [], until_out_of_replies=True)
        opening = [{"role": role, "content": text} for role, text in played.observations[0]]
        if self.chat is None:
            return Example("\n\n".join(m["content"] for m in opening), key)
        return Example(self.chat._tokenizer.apply_chat_template(opening, tokenize=False, add_generation_prompt=True),
                       key)

    def respond(self, example: Example, replies: list[str]) -> str | None:
        if len(replies) >= self.max_turns:
            return None
        played = self._play(example, replies, until_out_of_replies=True)
        if played.over:
            return None
        said = [{"role": role, "content": text} for role, text in played.observations[-1]]
        if self.chat is None:
            return "".join(m["content"] for m in said)
        conversation: list[dict[str, str]] = []
        for observation, reply in zip(played.observations, replies):
            conversation += [*({"role": role, "content": text} for role, text in observation),
                             {"role": "assistant", "content": reply}]
        return self.chat.continuation(conversation, said)

    # ------------------------------------------------------------------ prompts
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
            yield from (self._example(key) for key in keys)

    def eval_examples(self, n: int) -> list[Example]:
        keys = sorted(key for key in self._tasks if self._heldout(key))
        if len(keys) < n:
            raise ValueError(f"taskset {self.taskset_name!r} has {len(keys)} held-out tasks, fewer than {n}")
        return [self._example(key) for key in keys[:n]]

    def display_prompt(self, example: Example) -> str:
        opening = self._play(example, [], until_out_of_replies=True).observations[0]
        return "\n\n".join(text for _, text in opening) + " "

    # ------------------------------------------------------------------ scoring
    def episode_reward(self, example: Example, replies: list[str]) -> float:
        """What the env's ``run`` recorded plus the task's own ``score`` (a weighted reward sum)."""
        return float(self._play(example, replies, until_out_of_replies=False).trace.reward)

    def episode_correct(self, example: Example, replies: list[str]) -> bool:
        return self.episode_reward(example, replies) >= self.success_reward

    def reward(self, example: Example, completion: str) -> float:
        return self.episode_reward(example, [completion])

    def is_correct(self, example: Example, completion: str) -> bool:
        return self.reward(example, completion) >= self.success_reward
