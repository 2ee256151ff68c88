"""The agent the bench's agent runs play (``task.name=agent:attackers.text_agent:play``): one
``/v1/completions`` call per episode with the shipped tiny model (it has no chat template), scored
by the arithmetic task's verifier. What it learns is not the point: it drives the gateway."""

from __future__ import annotations

import openai

from echo2.tasks import Example
from echo2.tasks.arithmetic import ArithmeticTask

TASK = ArithmeticTask()


async def play(example: Example, client: openai.AsyncOpenAI) -> float:
    answer = await client.completions.create(model="policy", prompt=example.prompt)  # the run's token budget
    return float(TASK.is_correct(example, answer.choices[0].text))
