"""A verifiers (v1) taskset written as its users write one, for tests/unit/tasks/test_verifiers_env.py and tests/integration/test_verifiers_runs.py:
three-operand sums the shipped tiny model can answer, scored by a ``@vf.reward`` method."""

import random

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: int


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(self.data.answer))

    @vf.metric
    async def length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 400


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        rng = random.Random(0)
        for _ in range(self.config.num_tasks):
            a, b, c = rng.randint(0, 99), rng.randint(0, 99), rng.randint(0, 99)
            yield SumTask(SumData(prompt=f"{a}+{b}-{c}=", answer=a + b - c), self.config.task)
