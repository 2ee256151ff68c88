"""GSM8K-style math word problems, rewarded by math-verify.

GSM8K (Cobbe et al. 2021, arXiv 2110.14168): grade-school word problems whose reference
solutions end with ``#### <answer>``. A completion is right when math-verify (Hugging Face's
answer verifier, https://github.com/huggingface/Math-Verify) finds in it an answer
mathematically equal to the reference — it reads ``\\boxed{...}``, LaTeX or plain expressions,
so ``\\boxed{72}``, ``$72$`` and ``72.0`` all match ``72``.

Problems come from a Hugging Face dataset id (``openai/gsm8k``, config ``main``: train and test
splits; needs ``pip install 'echo2[math]'``) or a local JSONL file of ``{"question", "answer"}``
records (the held-out set is then ``eval_path`` or a hash slice of the file). With
``chat_template`` (a tokenizer's hub id or folder, normally the model's own) each prompt is the
instruct model's chat rendering of a system message and the question, ending where the
assistant's turn begins; workers and the learner then tokenize that text like any prompt.

Data and tokenizer load on first use: a worker only scores completions and never loads either.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from echo2.tasks.base import Example, Task, stable_fraction
from echo2.tasks.chat import ChatPrompt

#: Qwen2.5-Math's chain-of-thought instruction (its model cards' prompt), which Qwen2.5-Instruct follows too.
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
SYSTEM_PROMPT = "You are a helpful assistant."


def final_answer(solution: str) -> str:
    """The reference answer of a GSM8K solution (what follows ``####``), without thousands separators."""
    return solution.rpartition("####")[2].strip().replace(",", "")


def _math_verify():
    try:
        import math_verify
    except ImportError:
        raise ImportError("the gsm8k task scores with math-verify: pip install 'echo2[math]'") from None
    return math_verify


def _read_jsonl(path: str) -> list[dict]:
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not records or not all({"question", "answer"} <= set(r) for r in records):
        raise ValueError(f"{path}: expected JSON lines with 'question' and 'answer'")
    return records


def _hub_split(source: str, config: str, split: str) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise ImportError(f"loading {source!r} from the Hugging Face hub needs datasets: "
                          "pip install 'echo2[math]' (or give a local JSONL path)") from None
    return [dict(r) for r in datasets.load_dataset(source, config, split=split)]


class Gsm8kTask(Task):
    def __init__(self, source: str = "openai/gsm8k", config: str = "main", train_split: str = "train",
                 eval_split: str = "test", eval_path: str | None = None, heldout_fraction: float = 0.1,
                 chat_template: str | None = None, system_prompt: str = SYSTEM_PROMPT,
                 instruction: str = INSTRUCTION) -> None:
        self.source, self.config, self.train_split, self.eval_split = source, config, train_split, eval_split
        self.eval_path, self.heldout_fraction = eval_path, heldout_fraction
        self.chat_template, self.system_prompt, self.instruction = chat_template, system_prompt, instruction

    @cached_property
    def _splits(self) -> tuple[list[Example], list[Example]]:
        if Path(self.source).exists():
            records = _read_jsonl(self.source)
            if self.eval_path:
                train, held = records, _read_jsonl(self.eval_path)
            else:
                train = [r for r in records if stable_fraction(r["question"]) >= self.heldout_fraction]
                held = [r for r in records if stable_fraction(r["question"]) < self.heldout_fraction]
        else:
            train = _hub_split(self.source, self.config, self.train_split)
            held = _hub_split(self.source, self.config, self.eval_split)
        if not train:
            raise ValueError(f"{self.source}: no training problems")
        return [self._example(r) for r in train], [self._example(r) for r in held]

    @cached_property
    def _chat(self) -> ChatPrompt | None:
        return ChatPrompt(self.chat_template, self.system_prompt) if self.chat_template else None

    def prompt(self, question: str) -> str:
        """The prompt text for ``question``: the chat rendering when ``chat_template`` is set."""
        user = f"{question.strip()}\n{self.instruction}"
        return self._chat.render(user) if self._chat else f"Question: {user}\nAnswer:"

    def _example(self, record: dict) -> Example:
        return Example(prompt=self.prompt(record["question"]), answer=final_answer(str(record["answer"])))

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        order = list(self._splits[0])
        while True:
            rng.shuffle(order)
            yield from order

    def eval_examples(self, n: int) -> list[Example]:
        return self._splits[1][:n]

    def is_correct(self, example: Example, completion: str) -> bool:
        verify = _math_verify()
        # math-verify's timeouts use SIGALRM, which only the main thread may set: the coordinator's
        # scoring processes call this on theirs (echo2.coordinator.scoring_processes bounds every call)
        seconds = 5 if threading.current_thread() is threading.main_thread() else None
        gold = verify.parse(example.answer, parsing_timeout=seconds)
        answer = verify.parse(completion, parsing_timeout=seconds)
        return bool(gold and answer and verify.verify(gold, answer, timeout_seconds=seconds))

    def reward(self, example: Example, completion: str) -> float:
        return 1.0 if self.is_correct(example, completion) else 0.0
