"""The whole echo2 loop on one screen: your own task, a distributed run, its result.

    python examples/own_task.py

A task is a prompt source and a verifier (``echo2.tasks.Task``); the coordinator scores every
rollout with it, so workers never see an answer. ``run_training`` starts the learner with its
coordinator, two rollout workers as local processes (they could join from other machines by URL:
``echo2 worker --coordinator URL``), trains with bounded staleness S = 2, evaluates on the task's
held-out prompts, and leaves a run directory (metrics, checkpoints, plots, the resolved config).
"""

import random
from collections.abc import Iterator

from echo2.config import load_config
from echo2.launch.train import run_training
from echo2.tasks import Example, Task
from echo2.tasks.arithmetic import parse_int


class TwoSums(Task):
    """``a+b=`` with two-digit operands; held-out: every prompt whose ``a`` is a multiple of 10."""

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            a, b = rng.randint(11, 99), rng.randint(10, 99)
            if a % 10:
                yield Example(f"{a}+{b}=", str(a + b))

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(f"{a}+{b}=", str(a + b)) for a in range(10, 100, 10) for b in range(10, 100)][:n]

    def reward(self, example: Example, completion: str) -> float:
        return float(self.is_correct(example, completion))

    def is_correct(self, example: Example, completion: str) -> bool:
        return parse_int(completion) == int(example.answer)


if __name__ == "__main__":
    config = load_config(overrides=["task.name=__main__:TwoSums", "run.steps=120", "protocol=async", "staleness=2",
                                    "workers.count=2", "eval.every=40", "eval.size=200", "run.dir=runs/examples"])
    summary = run_training(config)
    print("\n".join(summary.lines()))
