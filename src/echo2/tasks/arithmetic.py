"""Multi-step integer arithmetic, the default task.

Prompts look like ``37+8-52=``. A completion either states the result directly (``-7``) or
works it out first, one operation at a time, after a scratchpad marker:
``<think>45-52=-7``. Either way the verifier reads the integer after the last ``=`` (or the whole
completion when it has none), so the reward is exact match on the final answer and says nothing
about the route. Difficulty is set by the number of operands and the largest operand. The held-out split is
decided by a hash of the prompt text (:func:`stable_fraction`), so it is disjoint from training
by construction, needs no state, and is the same on the learner, on every worker and in the
script that trains the shipped model.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from echo2.tasks.base import Example, Task, stable_fraction

#: Opens a worked solution (a single token in the shipped model's tokenizer).
WORK_MARKER = "<think>"


def parse_int(text: str) -> int | None:
    """The final integer a completion states (after its last ``=``), or None when there is none."""
    text = text.rpartition("=")[2].replace(WORK_MARKER, "").strip()
    try:
        return int(text)
    except ValueError:
        return None


class ArithmeticTask(Task):
    """``a ± b ± c …`` with ``num_operands`` operands drawn from ``[0, max_operand]``.

    ``partial_credit`` > 0 gives a wrong but well-formed integer a training reward of
    ``partial_credit * max(0, 1 - |answer - truth| / (|truth| + 10))``, a dense signal for a
    model too weak to be exactly right often; the held-out metric stays exact match.
    """

    def __init__(
        self,
        num_operands: int = 3,
        max_operand: int = 99,
        operators: str = "+-",
        heldout_fraction: float = 0.05,
        partial_credit: float = 0.0,
    ) -> None:
        if num_operands < 2:
            raise ValueError(f"num_operands must be >= 2, got {num_operands}")
        if max_operand < 1:
            raise ValueError(f"max_operand must be >= 1, got {max_operand}")
        if not operators or set(operators) - set("+-*"):
            raise ValueError(f"operators must be a non-empty subset of '+-*', got {operators!r}")
        if not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
        if not 0.0 <= partial_credit < 1.0:
            raise ValueError(f"partial_credit must be in [0, 1), got {partial_credit}")
        self.num_operands = num_operands
        self.max_operand = max_operand
        self.operators = operators
        self.heldout_fraction = heldout_fraction
        self.partial_credit = partial_credit

    def _random_example(self, rng: random.Random) -> Example:
        terms = [str(rng.randint(0, self.max_operand))]
        for _ in range(self.num_operands - 1):
            terms.append(rng.choice(self.operators))
            terms.append(str(rng.randint(0, self.max_operand)))
        expression = "".join(terms)
        return Example(prompt=expression + "=", answer=str(eval(expression)))  # noqa: S307 (digits and +-* only)

    def worked_solution(self, example: Example) -> str:
        """The step-by-step completion for ``example``: marker, then each left-to-right reduction.

        ``37+8-52=`` gives ``<think>45-52=-7``: every step is a single two-operand operation,
        which a small model gets right far more often than the whole expression at once.
        Products are reduced first, so the steps respect operator precedence.
        """
        tokens = re.findall(r"\d+|[+*-]", example.prompt.rstrip("="))
        steps = []
        while len(tokens) > 1:
            at = tokens.index("*") - 1 if "*" in tokens else 0
            value = str(eval("".join(tokens[at : at + 3])))  # noqa: S307 (digits and +-* only)
            tokens = [*tokens[:at], value, *tokens[at + 3 :]]
            steps.append("".join(tokens))
        return WORK_MARKER + "=".join(steps)

    def is_heldout(self, prompt: str) -> bool:
        return stable_fraction(prompt) < self.heldout_fraction

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            example = self._random_example(rng)
            if not self.is_heldout(example.prompt):
                yield example

    def eval_examples(self, n: int) -> list[Example]:
        rng = random.Random(0xE7A1)
        seen: set[str] = set()
        examples: list[Example] = []
        for _ in range(1000 * n):
            example = self._random_example(rng)
            if self.is_heldout(example.prompt) and example.prompt not in seen:
                seen.add(example.prompt)
                examples.append(example)
                if len(examples) == n:
                    return examples
        raise ValueError(f"the held-out split of this task has fewer than {n} distinct prompts")

    def is_correct(self, example: Example, completion: str) -> bool:
        return parse_int(completion) == int(example.answer)

    def reward(self, example: Example, completion: str) -> float:
        value = parse_int(completion)
        if value is None:
            return 0.0
        truth = int(example.answer)
        if value == truth:
            return 1.0
        return self.partial_credit * max(0.0, 1.0 - abs(value - truth) / (abs(truth) + 10))
