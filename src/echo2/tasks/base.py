"""The task interface: a prompt source plus a verifier.

A task is everything echo2 knows about a problem domain. The coordinator calls
:meth:`Task.reward` to score every submitted completion (verifiable rewards, computed on the
learner's side: workers never see a reference answer); the learner calls
:meth:`Task.is_correct` for the held-out exact-match metric. Prompts are split once and for all
into a training stream and a fixed held-out set that is never trained on.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass


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

    #: Inclusive range every reward returned by :meth:`reward` lies in.
    reward_range: tuple[float, float] = (0.0, 1.0)
    #: Reward that means "verified success" (used by the sampled-reward metric).
    success_reward: float = 1.0

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

    def display_prompt(self, example: Example) -> str:
        """The prompt as shown beside sample completions (a chat-templated prompt shows its question)."""
        return example.prompt

    def is_well_formed(self, completion: str) -> bool:
        """Whether ``completion`` answers in the format the prompt asks for (evaluation reports the share)."""
        return True
