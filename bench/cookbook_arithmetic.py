"""tinker-cookbook's arithmetic environment as an echo2 task: ``bench/tinker_service.py``'s native arm.

``tinker_cookbook.recipes.math_rl`` (0.5.8) asks ``What is x + y?`` (x, y in [0, 100]) after one
worked example, rendered by its ``qwen3_instruct`` renderer (ChatML, which SmolLM2-Instruct speaks),
and rewards ``correct + 0.1 * (format - 1)``: correct when the reply's last integer is the sum,
well formed when the reply ended with the end-of-turn token within the token budget. This task
gives echo2's own loop the same prompts (the renderer's text, which SmolLM2's tokenizer encodes to
the renderer's very tokens) and the same reward, so the two drivers learn the same problem.

An echo2 verifier reads a reply's text (its end-of-turn token decoded away), so *ended its turn*
is read as *shorter than the token budget*: a reply that did not stop fills ``max_tokens``. The one
reply told apart wrongly is one that stopped on another special token (skipped when decoding).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from functools import cached_property

from echo2.tasks.base import Example, Task, stable_fraction

FEWSHOT = "<|im_start|>user\nWhat is 4 + 5?<|im_end|>\n<|im_start|>assistant\n9<|im_end|>\n"
INTEGER = re.compile(r"-?\d+")
HELDOUT = 0.1


def prompt(x: int, y: int) -> str:
    """What the cookbook's ``qwen3_instruct`` renderer makes of the arithmetic environment's question."""
    return f"{FEWSHOT}<|im_start|>user\nWhat is {x} + {y}?<|im_end|>\n<|im_start|>assistant\n"


class CookbookArithmetic(Task):
    """``tokenizer``: the model whose tokens count the reply (``max_tokens``: the sampling budget)."""

    def __init__(self, tokenizer: str = "smollm2-135m-instruct", max_tokens: int = 5, format_coef: float = 0.1) -> None:
        self.tokenizer_source, self.max_tokens, self.format_coef = tokenizer, max_tokens, format_coef

    @cached_property
    def _tokenizer(self):
        from echo2.model.loading import load_tokenizer

        return load_tokenizer(self.tokenizer_source)

    def _examples(self, rng: random.Random, heldout: bool) -> Iterator[Example]:
        """The cookbook's questions (it holds none out: echo2 keeps a tenth of them for evaluation)."""
        while True:
            x, y = rng.randint(0, 100), rng.randint(0, 100)
            if (stable_fraction(f"{x}+{y}") < HELDOUT) == heldout:
                yield Example(prompt=prompt(x, y), answer=str(x + y))

    def train_examples(self, seed: int) -> Iterator[Example]:
        return self._examples(random.Random(seed), heldout=False)

    def eval_examples(self, n: int) -> list[Example]:
        examples = self._examples(random.Random(0), heldout=True)
        return [next(examples) for _ in range(n)]

    def is_correct(self, example: Example, completion: str) -> bool:
        found = INTEGER.findall(completion.replace(",", ""))
        return bool(found) and int(found[-1]) == int(example.answer)

    def is_well_formed(self, completion: str) -> bool:
        return len(self._tokenizer(completion, add_special_tokens=False)["input_ids"]) < self.max_tokens

    def reward(self, example: Example, completion: str) -> float:
        return self.format_coef * (self.is_well_formed(completion) - 1) + self.is_correct(example, completion)
