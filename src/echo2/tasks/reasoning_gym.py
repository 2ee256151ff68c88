"""Any procedural, verifiable task of reasoning-gym (``pip install 'echo2[reasoning-gym]'``).

reasoning-gym (https://github.com/open-thought/reasoning-gym) generates ~100 reasoning tasks —
``chain_sum``, ``basic_arithmetic``, ``leg_counting``, ``gsm_symbolic``, ``countdown``, … —
each entry a question, a reference answer and metadata, each dataset with its own
``score_answer``. ``task.options`` names the dataset and passes every option echo2 does not
use itself (below) to the generator, e.g. ``{dataset: chain_sum, min_terms: 2, max_terms: 2,
min_digits: 1, max_digits: 2}``.

**Prompt.** The question, then ``instruction`` on a new line, rendered with the chat template of
``chat_template`` (normally the trained model's name) when given, else as plain text.

**Answer extraction** (``answer_format``):

* ``last_number`` (default, for numeric datasets): the last number in the completion (an
  optional sign, digits with optional thousands commas, an optional decimal part), so that
  "The answer is 42." reads 42. *Well-formed* means the completion is that number and nothing
  else (surrounding whitespace and one final period allowed) — what "Answer with only the
  number." asks for.
* ``tag``: reasoning-gym's own convention, the text of the last ``<answer>…</answer>``; *well-formed*
  means such a tag is present.
* ``whole``: the whole completion, stripped; always well-formed.

**Rewards.** The dataset's ``score_answer(extracted, entry)`` decides. The held-out metric
(:meth:`is_correct`) is exact: a score of 1. The training reward is exact too unless
``partial_credit`` keeps the scorer's partial scores (e.g. chain_sum's credit for an answer that
contains the right number among other text); ``format_reward`` adds a bonus to well-formed
completions (rewards then range over ``[0, 1 + format_reward]``).

**Split.** Training entries come from the generator seeded with the run's seed, held-out entries
from one seeded with ``eval_seed``; an entry is held out iff a hash of its question falls below
``heldout_fraction`` (:func:`~echo2.tasks.base.stable_fraction`), so no question can appear on
both sides whatever the seeds (reasoning-gym seeds entry ``i`` with ``seed + i``: streams of
nearby seeds overlap, which is why the split cannot rest on seeds). Held-out questions are
distinct. Each :class:`~echo2.tasks.base.Example` carries the entry as JSON in ``answer``, since
some scorers read the entry's metadata.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cached_property
from typing import Any, Literal

from echo2.tasks.base import Example, Task, stable_fraction
from echo2.tasks.chat import ChatPrompt

#: Echo2's default instruction: reasoning-gym's questions say what to compute, not how to answer.
INSTRUCTION = "Answer with only the number."
#: Seed of the held-out generator (any seed works: the split is by question hash).
EVAL_SEED = 0xE7A1
#: Entries a generator is asked for; reasoning-gym generates entry ``i`` on demand, so this only bounds ``i``.
_VIRTUAL_SIZE = 10**9

_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
_LAST_NUMBER = re.compile(_NUMBER)
_ONLY_NUMBER = re.compile(rf"\s*({_NUMBER})\.?\s*")

AnswerFormat = Literal["last_number", "tag", "whole"]


def _reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError("task.name=reasoning_gym needs reasoning-gym: pip install 'echo2[reasoning-gym]'") from None
    return reasoning_gym


def extract_answer(completion: str, answer_format: AnswerFormat) -> tuple[str | None, bool]:
    """``(answer, well_formed)`` read from ``completion`` as ``answer_format`` says (module docstring)."""
    if answer_format == "last_number":
        numbers = _LAST_NUMBER.findall(completion)
        return (numbers[-1] if numbers else None), _ONLY_NUMBER.fullmatch(completion) is not None
    if answer_format == "tag":
        answer = _reasoning_gym().utils.extract_answer(completion)
        return answer, answer is not None
    return completion.strip(), True


class ReasoningGymTask(Task):
    def __init__(self, dataset: str, *, chat_template: str | None = None, system_prompt: str | None = None,
                 instruction: str = INSTRUCTION, answer_format: AnswerFormat = "last_number",
                 partial_credit: bool = False, format_reward: float = 0.0, heldout_fraction: float = 0.1,
                 eval_seed: int = EVAL_SEED, **generator_options: Any) -> None:
        if answer_format not in ("last_number", "tag", "whole"):
            raise ValueError(f"answer_format must be last_number, tag or whole, got {answer_format!r}")
        if not 0.0 < heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
        if format_reward < 0:
            raise ValueError(f"format_reward must be >= 0, got {format_reward}")
        self.dataset, self.generator_options = dataset, generator_options
        self.instruction, self.answer_format = instruction, answer_format
        self.partial_credit, self.format_reward = partial_credit, format_reward
        self.heldout_fraction, self.eval_seed = heldout_fraction, eval_seed
        self.chat = ChatPrompt(chat_template, system_prompt) if chat_template else None
        self._generator(seed=0)  # fail now, with the generator's own message, on a bad dataset or option

    def _generator(self, seed: int):
        reasoning_gym = _reasoning_gym()
        try:
            return reasoning_gym.create_dataset(self.dataset, seed=seed, size=_VIRTUAL_SIZE, **self.generator_options)
        except (TypeError, ValueError, AssertionError) as error:
            raise ValueError(f"task.options for reasoning_gym dataset {self.dataset!r}: {error}") from None

    @cached_property
    def _scorer(self):
        return self._generator(seed=0)

    def prompt(self, question: str) -> str:
        user = f"{question.strip()}\n{self.instruction}" if self.instruction else question.strip()
        return self.chat.render(user) if self.chat else user

    def is_heldout(self, question: str) -> bool:
        return stable_fraction(question) < self.heldout_fraction

    def _entries(self, seed: int) -> Iterator[dict[str, Any]]:
        generator = self._generator(seed)
        index = 0
        while True:
            yield generator[index]
            index += 1

    def _example(self, entry: dict[str, Any]) -> Example:
        return Example(prompt=self.prompt(entry["question"]), answer=json.dumps(entry, default=list))

    def train_examples(self, seed: int) -> Iterator[Example]:
        for entry in self._entries(seed):
            if not self.is_heldout(entry["question"]):
                yield self._example(entry)

    def eval_examples(self, n: int) -> list[Example]:
        seen: set[str] = set()
        examples: list[Example] = []
        for tried, entry in enumerate(self._entries(self.eval_seed)):
            if tried >= 1000 * n:
                raise ValueError(f"reasoning_gym {self.dataset!r} with these options has fewer than {n} distinct "
                                 f"held-out questions (found {len(examples)}); raise heldout_fraction or the difficulty")
            if self.is_heldout(entry["question"]) and entry["question"] not in seen:
                seen.add(entry["question"])
                examples.append(self._example(entry))
                if len(examples) == n:
                    return examples
        raise AssertionError("unreachable: the entry stream is endless")

    def score(self, example: Example, completion: str) -> tuple[float, bool]:
        """``(scorer's score of the extracted answer, well_formed)``."""
        answer, well_formed = extract_answer(completion, self.answer_format)
        return float(self._scorer.score_answer(answer, json.loads(example.answer))), well_formed

    def is_correct(self, example: Example, completion: str) -> bool:
        return self.score(example, completion)[0] >= 1.0

    def is_well_formed(self, completion: str) -> bool:
        return extract_answer(completion, self.answer_format)[1]

    def display_prompt(self, example: Example) -> str:
        return json.loads(example.answer)["question"] + " "

    def reward(self, example: Example, completion: str) -> float:
        score, well_formed = self.score(example, completion)
        correctness = score if self.partial_credit else float(score >= 1.0)
        return correctness + (self.format_reward if well_formed else 0.0)
