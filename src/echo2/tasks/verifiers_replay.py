"""A ``verifiers`` (v1) environment's episode, played again from the model's replies so far.

verifiers writes a multi-turn environment as control flow: ``Env.run(task, agents)`` opens
``agents.<seat>.interaction(task)`` and alternates ``await interaction.turn(message)`` (the
model's next reply comes back in a ``Segment``) with its own logic — a game engine stepping,
feedback, a checker. In verifiers the model is reached through harnesses and an intercepted
OpenAI-compatible endpoint; in echo2 the model's turns are sampled on workers and the environment
runs on the coordinator, where the learner trusts it (:mod:`echo2.model.episodes`). This module is the
bridge: it runs the environment's own ``setup`` and ``run`` with a stand-in seat whose ``turn``
hands back the replies the model has already given, in order, and stops the play where they
run out:

- **to answer** (:func:`play` with ``until_out_of_replies``): the turn the environment asks for
  next is the one no reply exists for yet, so the messages it sent since the model's last reply
  are its observation; the play stops there (:class:`_OutOfReplies`).
- **to score**: when the replies run out the turn comes back ``terminated`` (as verifiers ends an
  exchange at a limit), ``run`` finishes, and the trace carries the rewards ``run`` recorded plus
  the task's own ``score`` (run as the interaction closes, as in verifiers).

Each answer replays the episode from its start (a ``k``-turn episode costs ``k(k+1)/2``
environment turns), which needs ``run`` to be a function of the task and the replies: verifiers'
own game tasksets seed their engines per task for exactly this reproducibility, and
:class:`~echo2.tasks.verifiers_env.VerifiersTask` checks every replay against the answers given.
One seat, one interaction per episode (echo2 trains one conversation per episode).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

Message = tuple[str, str]
"""A message as (role, text)."""


class _OutOfReplies(BaseException):  # noqa: N818
    """Stops a play where the model has not replied yet. A BaseException, like asyncio's
    cancellation, so that an environment's ``except Exception`` cannot swallow it."""


@dataclass
class Played:
    """One play of an episode: each turn's messages from the environment, and the trace."""

    observations: list[list[Message]]
    """What the environment sent before each model turn (index 0: the opening messages), up to
    the turn no reply exists for; one more entry than replies while the episode goes on."""
    over: bool
    """Whether the environment ended the episode (no next turn asked for)."""
    trace: Any
    """The verifiers trace (rewards recorded and scored when the play ran to its end)."""


def prompt_messages(data: Any) -> list[Message]:
    """A task's opening messages: its system prompt, then its prompt (text or messages)."""
    messages: list[Message] = [("system", data.system_prompt)] if data.system_prompt else []
    if data.prompt is None:
        return messages
    if isinstance(data.prompt, str):
        return [*messages, ("user", data.prompt)]
    return [*messages, *((m.role, _text(m.content)) for m in data.prompt)]


def _text(content: Any) -> str:
    if not isinstance(content, str):
        raise ValueError(f"echo2 runs text-only verifiers environments; a message carries {type(content).__name__}")
    return content


class _Interaction:
    """The stand-in for verifiers' ``Interaction``: ``turn`` returns the next recorded reply."""

    def __init__(self, task: Any, seat: str, replies: list[str], stop_when_out: bool) -> None:
        import verifiers.v1 as vf
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.trace import AgentInfo, TraceTask

        self._vf, self._task, self._replies, self._stop_when_out = vf, task, iter(replies), stop_when_out
        self.trace = vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                              agent=AgentInfo(config=AgentConfig(), name=seat), nodes=[])
        self.observations: list[list[Message]] = []
        self._pending: list[Message] = []
        self._started = self._over = False
        for role, text in prompt_messages(task.data):
            self._add(role, text)

    def _add(self, role: str, text: str, sampled: bool = False) -> None:
        from verifiers.v1.graph import MessageNode

        kinds = {"system": self._vf.SystemMessage, "user": self._vf.UserMessage,
                 "assistant": self._vf.AssistantMessage}
        if role not in kinds:
            raise ValueError(f"echo2 cannot insert a {role!r} message into an episode of a verifiers environment")
        nodes = self.trace.nodes
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=kinds[role](content=text),
                                 sampled=sampled))
        if not sampled:
            self._pending.append((role, text))

    async def turn(self, message: Any = None) -> Any:
        from verifiers.v1.agent import Segment

        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self._started and self._task.data.prompt is not None
        if (message is None) != prompted:
            raise ValueError("a prompted task's first turn is a bare turn(); every other turn takes a message")
        self._started = True
        if isinstance(message, str):
            self._add("user", message)
        elif message is not None:
            for m in message:
                role, content = (m["role"], m["content"]) if isinstance(m, dict) else (m.role, m.content)
                self._add(role, _text(content))
        self.observations.append(self._pending)
        self._pending = []
        reply = next(self._replies, None)
        if reply is None:
            if self._stop_when_out:
                raise _OutOfReplies
            self.observations.pop()  # asked for, never answered: not an observation of this episode
            self._over = True
            return Segment(messages=[], terminated=True)
        self._add("assistant", reply, sampled=True)
        return Segment(messages=[self.trace.nodes[-1].message])


class _Seat:
    """The stand-in for verifiers' ``Agent`` in the environment's one seat."""

    def __init__(self, name: str, config: Any, replies: list[str], stop_when_out: bool) -> None:
        self.name, self.config, self.trainable = name, config, True
        self._replies, self._stop_when_out = replies, stop_when_out
        self.played: _Interaction | None = None

    @asynccontextmanager
    async def interaction(self, task: Any, **_: Any) -> AsyncIterator[_Interaction]:
        if self.played is not None:
            raise ValueError(f"seat {self.name!r} opens a second interaction in one episode; echo2 trains one "
                             "conversation per episode")
        self.played = _Interaction(task, self.name, self._replies, self._stop_when_out)
        yield self.played
        self.played.trace.stop("user_closed")
        await task.score(self.played.trace)

    async def run(self, task: Any, **_: Any) -> Any:
        """A plain taskset's episode (verifiers' ``SingleAgentEnv``): one reply to the prompt."""
        async with self.interaction(task) as interaction:
            await interaction.turn()
        return interaction.trace


def play(env: Any, seat: str, task: Any, replies: list[str], until_out_of_replies: bool) -> Played:
    """Run ``env``'s episode of ``task`` with the model's ``replies`` (see the module docstring)."""
    chair = _Seat(seat, getattr(env.config, seat, None), replies, until_out_of_replies)
    agents = SimpleNamespace(**{seat: chair})

    async def episode() -> bool:
        await env.setup(agents)
        try:
            await env.run(task, agents)
        except _OutOfReplies:
            return False
        return True

    over = asyncio.run(episode())
    if chair.played is None:
        raise ValueError(f"{type(env).__name__}.run ended without opening seat {seat!r}'s interaction")
    return Played(chair.played.observations, over, chair.played.trace)
