"""A task where the tool matters: the secret number of an item, drawn per episode, that only a
``lookup`` tool can tell (``configs/smollm2-135m-lookup-agent.yaml``).

The agent (:func:`play`, ``task.name=agent:echo2.recipes.lookup:play``) asks the model for the
secret number of an item and offers one tool, ``lookup(item)``, through the gateway's tool format
(OpenAI ``tools`` and ``tool_calls``). The number is drawn afresh for every episode, four digits,
so no model can know or learn it: an episode is solved only by calling the tool (turn 1) and
then stating what it returned (turn 2 or 3). Up to :data:`MAX_TURNS` calls.

Reward: 1 when the final reply states the number, :data:`CALL_CREDIT` when the model called
``lookup`` for the item but did not state the number, 0 otherwise. Logged per episode: ``called``
(a well-formed lookup of the right item), ``solved``, and ``solved_turn`` (the call that stated
it, 0 when unsolved). :func:`play_without_tool` asks the same question with no tool offered: the
baseline, which can only guess.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import openai

from echo2.tasks.base import Example, Task

MAX_TURNS = 3
CALL_CREDIT = 0.2
MAX_TOKENS = 40

LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "The secret number of an item.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}

SYSTEM = "You are a helpful assistant."
ASK = ('What is the secret number of the {item}? You cannot know it: look it up by replying with exactly '
       '<tool_call>{{"name": "lookup", "arguments": {{"item": "{item}"}}}}</tool_call>')
ASK_WITHOUT_TOOL = "What is the secret number of the {item}?"

#: Items of the training stream and, disjoint, of the held-out set.
TRAIN_ITEMS = ("apple river candle tiger violin pencil garden rocket window bottle mirror lantern basket "
               "hammer blanket compass ladder teapot anchor feather pillow saddle trumpet wallet").split()
HELD_OUT_ITEMS = "kettle harbor marble orchard ribbon".split()


class LookupItems(Task):
    """The items the agent asks about (``agent.examples: echo2.recipes.lookup:LookupItems``); the
    agent scores its episodes (:func:`play`), so the verdicts here are never called on a run."""

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            yield Example(rng.choice(TRAIN_ITEMS), "")

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(HELD_OUT_ITEMS[i % len(HELD_OUT_ITEMS)], "") for i in range(n)]

    def reward(self, example: Example, completion: str) -> float:
        raise NotImplementedError("the lookup agent scores its own episodes (echo2.recipes.lookup.play)")

    def is_correct(self, example: Example, completion: str) -> bool:
        raise NotImplementedError("the lookup agent scores its own episodes (echo2.recipes.lookup.play)")


def _looked_up(message, item: str) -> bool:
    """Whether ``message`` calls ``lookup`` for ``item``."""
    for call in message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
        except json.JSONDecodeError:
            continue
        if call.function.name == "lookup" and str(arguments.get("item", "")).strip().lower() == item:
            return True
    return False


async def play(example: Example, client: openai.AsyncOpenAI, tool: bool = True) -> dict[str, float]:
    """One episode about ``example.prompt`` (an item), the secret drawn now."""
    secret = str(random.SystemRandom().randrange(1000, 10000))
    item = example.prompt
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": (ASK if tool else ASK_WITHOUT_TOOL).format(item=item)}]
    called, solved_turn = False, 0
    for turn in range(1, MAX_TURNS + 1):
        answer = await client.chat.completions.create(model="policy", messages=messages, max_tokens=MAX_TOKENS,
                                                      **({"tools": [LOOKUP]} if tool else {}))
        message = answer.choices[0].message
        if secret in (message.content or ""):
            solved_turn = turn
            break
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            right = _looked_up(message, item) and call.function.name == "lookup"
            called = called or right
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": secret if right else f"error: use lookup with item {item!r}"})
    reward = 1.0 if solved_turn else CALL_CREDIT if called else 0.0
    return {"reward": reward, "called": float(called), "solved": float(bool(solved_turn)),
            "solved_turn": float(solved_turn)}


async def play_without_tool(example: Example, client: openai.AsyncOpenAI) -> dict[str, float]:
    """The baseline: the same question, no tool offered (only a guess can be right)."""
    return await play(example, client, tool=False)
