"""The data cursor: the task's training stream, numbered.

Every example the coordinator draws gets its *draw index* — its position in the task's
deterministic stream. The index is what the books use to prove that no prompt is lost and none
is trained twice (a prompt re-queued after an expired lease or a stale group keeps its index),
and the count of draws is all a resumed run needs to continue the stream where it stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from echo2.tasks import Example


@dataclass(frozen=True)
class DrawnExample(Example):
    """An example with its position in the training stream."""

    draw: int = -1


class CountingStream(Iterator[DrawnExample]):
    """The training stream from draw ``skip`` on (a resumed run skips what was drawn before)."""

    def __init__(self, examples: Iterator[Example], skip: int = 0) -> None:
        self._examples = itertools.islice(examples, skip, None)
        self.drawn = skip

    def __next__(self) -> DrawnExample:
        example = next(self._examples)
        drawn = DrawnExample(prompt=example.prompt, answer=example.answer, draw=self.drawn)
        self.drawn += 1
        return drawn


class TrainedDraws:
    """Draw indices of the prompts trained on, so that a prompt trained twice is counted, never hidden."""

    def __init__(self, draws: list[int] = ()) -> None:
        self.draws = set(draws)

    def add(self, example: Example) -> bool:
        """Record ``example`` as trained on; False if it had been already."""
        draw = getattr(example, "draw", -1)
        first = draw not in self.draws
        self.draws.add(draw)
        return first

    def discard(self, example: Example) -> None:
        """``example`` left the learner's batch untrained (quarantined or filtered after it was taken)."""
        self.draws.discard(getattr(example, "draw", -1))
