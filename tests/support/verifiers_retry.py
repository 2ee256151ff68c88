"""A multi-turn verifiers (v1) environment written as its users write one (a taskset package that
exports its Taskset and its Env via ``__all__``, loaded by id), for tests/unit/tasks/test_verifiers_env.py and tests/integration/test_verifiers_runs.py.

The env's ``run`` is a small game stepped host-side, like verifiers' TextArena env: the model
answers a three-operand sum; a wrong answer is met with ``+=`` (higher) or ``-=`` (lower) and the
model answers again, up to the seat's ``max_turns``; the env records the game's reward. Only
characters the shipped tiny model's tokenizer knows are used.
"""

import random
import re

import verifiers.v1 as vf


class RetryData(vf.TaskData):
    answer: int


class RetryTask(vf.Task[RetryData]):
    @vf.metric
    async def reply_length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class RetryConfig(vf.TasksetConfig):
    num_tasks: int = 400


class RetryTaskset(vf.Taskset[RetryTask, RetryConfig]):
    def load(self):
        rng = random.Random(0)
        for _ in range(self.config.num_tasks):
            a, b, c = rng.randint(0, 99), rng.randint(0, 99), rng.randint(0, 99)
            yield RetryTask(RetryData(prompt=f"{a}+{b}-{c}=", answer=a + b - c), self.config.task)


def guess_of(reply: str) -> int | None:
    found = re.fullmatch(r"\s*(-?\d+)\s*", reply)
    return int(found.group(1)) if found else None


class RetryEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=3)


class RetryEnv(vf.Env[RetryEnvConfig]):
    async def run(self, task, agents):
        solved = False
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                guess = guess_of(segment.last_reply)
                if guess == task.data.answer:
                    solved = True
                    break
                feedback = "=" if guess is None else "+=" if task.data.answer > guess else "-="
                segment = await interaction.turn(feedback)
        interaction.trace.record_reward("solved", float(solved))


class CoinFlipEnv(RetryEnv):
    """Feedback drawn at random each time: not a function of the task and the replies."""

    async def run(self, task, agents):
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                segment = await interaction.turn(random.choice(["+=", "-="]))


__all__ = ["RetryEnv", "RetryTaskset"]
