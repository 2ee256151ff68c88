"""Prompts with reference answers from a JSONL file, one ``{"prompt": ..., "answer": ...}`` a line.

The verifier compares the completion with the answer after stripping whitespace; when both
parse as numbers they are compared as numbers. The held-out set is either a second file or a
hash-based slice of the same file (disjoint from training either way).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from echo2.tasks.base import Example, Task, stable_fraction


def _load(path: str) -> list[Example]:
    examples = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            examples.append(Example(prompt=str(record["prompt"]), answer=str(record["answer"])))
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: expected a JSON object with 'prompt' and 'answer' ({error})") from None
    if not examples:
        raise ValueError(f"{path}: no examples")
    return examples


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


class JsonlTask(Task):
    """Examples from ``path``; held-out from ``eval_path`` or a ``heldout_fraction`` hash slice."""

    def __init__(self, path: str, eval_path: str | None = None, heldout_fraction: float = 0.1) -> None:
        examples = _load(path)
        if eval_path:
            self._train, self._eval = examples, _load(eval_path)
        else:
            self._train = [e for e in examples if stable_fraction(e.prompt) >= heldout_fraction]
            self._eval = [e for e in examples if stable_fraction(e.prompt) < heldout_fraction]
        if not self._train:
            raise ValueError(f"{path}: no training examples left after the held-out split")

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        order = list(self._train)
        while True:
            rng.shuffle(order)
            yield from order

    def eval_examples(self, n: int) -> list[Example]:
        return self._eval[:n]

    def is_correct(self, example: Example, completion: str) -> bool:
        got, want = completion.strip(), example.answer.strip()
        if got == want:
            return True
        got_number, want_number = _as_number(got), _as_number(want)
        return got_number is not None and got_number == want_number

    def reward(self, example: Example, completion: str) -> float:
        return 1.0 if self.is_correct(example, completion) else 0.0
