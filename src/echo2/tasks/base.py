"""The task interface: a prompt source, a verifier, and (for episodes) an environment.

A task is everything echo2 knows about a problem domain. The coordinator scores every submitted
rollout with :meth:`Task.episode_reward` (verifiable rewards, computed on the learner's side:
workers never see a reference answer); the learner calls :meth:`Task.episode_correct` for the
held-out metric. Prompts are split once and for all into a training stream and a fixed held-out
set that is never trained on.

A task whose ``max_turns`` is above 1 is an environment: after each model reply,
:meth:`Task.respond` gives the text inserted before the model's next turn (feedback, an
observation, a tool's result) or ends the episode. It runs on the coordinator, which holds the
reference answers, when a worker asks (:mod:`echo2.model.episodes`). A single-turn task is the
one-turn case: it never responds, and its episode reward is the reward of its one reply.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from echo2.config.base import import_path


@dataclass(frozen=True)
class Example:
    """One prompt with the reference answer its verifier needs."""

    prompt: str
    answer: str


def stable_fraction(text: str) -> float:
    """A hash of ``text`` mapped to [0, 1), identical on every machine and Python run."""
    return zlib.crc32(text.encode()) / 2**32


class Task(ABC):
    """Prompt source + verifier. Subclass it and point ``task.name`` at ``module:Class``."""

    #: Most model turns in an episode (1: one reply, the environment never speaks).
    max_turns: int = 1

    @abstractmethod
    def train_examples(self, seed: int) -> Iterator[Example]:
        """An endless, deterministic stream of training examples (never a held-out one)."""

    @abstractmethod
    def eval_examples(self, n: int) -> list[Example]:
        """The first ``n`` held-out examples: fixed, disjoint from the training stream."""

    @abstractmethod
    def reward(self, example: Example, completion: str) -> float:
        """Training reward of ``completion`` (may give partial credit)."""

    @abstractmethod
    def is_correct(self, example: Example, completion: str) -> bool:
        """Exact-match verdict used for held-out accuracy (never partial)."""

    def respond(self, example: Example, replies: list[str]) -> str | None:
        """The environment's answer to the model's ``replies`` so far (the last one is new): the
        text to insert before the model's next turn, already in the model's format (a chat task
        renders its message with the chat template), or None when the episode is over. Called
        only while ``len(replies) < max_turns``. Single-turn tasks: None."""
        return None

    def episode_reward(self, example: Example, replies: list[str]) -> float:
        """Training reward of a whole episode (default: the reward of its last reply)."""
        return self.reward(example, replies[-1])

    def episode_rewards(self, example: Example, episodes: list[list[str]]) -> list[float]:
        """The rewards of a group's episodes of ``example`` (each its list of replies): one call per
        group where the coordinator scores (:mod:`echo2.coordinator.scoring`); override to score a
        group at once (a reward model's batch)."""
        return [self.episode_reward(example, replies) for replies in episodes]

    def episode_correct(self, example: Example, replies: list[str]) -> bool:
        """Held-out verdict of a whole episode (default: whether its last reply is correct)."""
        return self.is_correct(example, replies[-1])

    def display_prompt(self, example: Example) -> str:
        """The prompt as shown beside sample completions (a chat-templated prompt shows its question)."""
        return example.prompt

    def is_well_formed(self, completion: str) -> bool:
        """Whether ``completion`` answers in the format the prompt asks for (evaluation reports the share)."""
        return True


def import_class(path: str, base: type, what: str, kind: str) -> type:
    """The class ``module:Class`` names, or a ValueError saying ``what`` could not be imported or
    is not a ``kind`` (a subclass of ``base``)."""
    found = import_path(path, what)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ValueError(f"{what} is not a {kind}")
    return found
