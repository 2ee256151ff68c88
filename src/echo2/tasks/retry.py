"""Arithmetic with feedback: the model answers, the environment says "higher" or "lower", the model
tries again — a multi-turn episode the shipped tiny model can learn on a laptop.

An episode of ``37+8-52=``: the model answers (``-9``); a wrong answer is met with ``+=`` (the
result is higher) or ``-=`` (lower), ``=`` when no integer could be read, and the model answers
again, up to ``max_turns`` answers. The feedback uses only characters the shipped model's
tokenizer knows, and reaches the model as inserted tokens it never trains on
(:mod:`echo2.model.episodes`). An episode that is solved at answer ``k`` earns ``retry_discount ** (k - 1)``
(so a first-time answer is worth most and using the feedback still pays); one never solved earns
nothing. Held-out success is "solved within the episode", greedily; evaluation also reports the
first answer's accuracy on its own, so that what the feedback adds is visible.

With ``hidden_shift`` > 0 the value the environment wants is the expression's plus a shift in
``[-hidden_shift, hidden_shift]``, fixed per prompt by a hash and never shown: a first answer is
right only when the shift is 0, and solving the rest needs the feedback — what is learned is then
using it (move the last answer the way the feedback says), not only computing better.

The environment is a pure function of the prompt and the replies: the coordinator, which holds
the reference answer, computes every feedback a worker asks for and checks each inserted token
of a submitted episode against it.

Its feedback reveals the answer: higher/lower bisects the answer's range in about ten replies,
inside a lease's G × (max_turns − 1) answers. The coordinator answers only the turns of the
lease's episodes and refuses a submission that leaves any answered turn out
(``coordinator/leases.py`` ``transcript_problem``), so a worker's probes are scored and trained
like the rest, but a worker that spends its episodes on probes can find the answer.
"""

from __future__ import annotations

import hashlib
import random

from echo2.tasks.arithmetic import ArithmeticTask, parse_int
from echo2.tasks.base import Example


class RetryArithmeticTask(ArithmeticTask):
    """:class:`ArithmeticTask` prompts as episodes of up to ``max_turns`` answers with higher/lower feedback."""

    HIGHER, LOWER, UNREADABLE = "+=", "-=", "="

    def __init__(self, max_turns: int = 3, retry_discount: float = 0.7, hidden_shift: int = 0,
                 **arithmetic: object) -> None:
        super().__init__(**arithmetic)  # type: ignore[arg-type]
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not 0.0 < retry_discount <= 1.0:
            raise ValueError(f"retry_discount must be in (0, 1], got {retry_discount}")
        if hidden_shift < 0:
            raise ValueError(f"hidden_shift must be >= 0, got {hidden_shift}")
        self.max_turns, self.retry_discount, self.hidden_shift = max_turns, retry_discount, hidden_shift

    def _random_example(self, rng: random.Random) -> Example:
        example = super()._random_example(rng)
        if not self.hidden_shift:
            return example
        # sha256, not the crc32 that splits off the held-out set: a crc of the prompt would tie the
        # shift to the split (crc is linear), and every held-out prompt would get nearly the same one
        digest = int.from_bytes(hashlib.sha256(example.prompt.encode()).digest()[:8], "little")
        shift = digest % (2 * self.hidden_shift + 1) - self.hidden_shift
        return Example(example.prompt, str(int(example.answer) + shift))

    def respond(self, example: Example, replies: list[str]) -> str | None:
        value, truth = parse_int(replies[-1]), int(example.answer)
        if value == truth or len(replies) >= self.max_turns:
            return None
        if value is None:
            return self.UNREADABLE
        return self.HIGHER if truth > value else self.LOWER

    def solved_at(self, example: Example, replies: list[str]) -> int | None:
        """The 1-based answer that got it right, or None."""
        return next((k for k, reply in enumerate(replies, 1) if self.is_correct(example, reply)), None)

    def episode_reward(self, example: Example, replies: list[str]) -> float:
        turn = self.solved_at(example, replies)
        return 0.0 if turn is None else self.retry_discount ** (turn - 1)

    def episode_correct(self, example: Example, replies: list[str]) -> bool:
        return self.solved_at(example, replies) is not None
