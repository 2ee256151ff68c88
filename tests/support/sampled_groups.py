"""Rollout groups sampled from the shipped model, with rewards chosen by the test."""

from collections.abc import Callable

from echo2.exchange import Group
from echo2.model.draws import Draws
from echo2.model.sampling import sample
from echo2.tasks import ArithmeticTask


def sampled_groups(model, tokenizer, n_groups: int, group_size: int,
                   rewards: Callable[[int], list[float]], seed: int = 0, version: int = 0) -> list[Group]:
    """``n_groups`` groups of ``group_size`` completions; group g gets ``rewards(g)``."""
    stream = ArithmeticTask().train_examples(seed=seed)
    examples = [next(stream) for _ in range(n_groups)]
    prompt_ids = [tokenizer(e.prompt)["input_ids"] for e in examples for _ in range(group_size)]
    samples = sample(model, prompt_ids, max_new_tokens=8, eos_id=tokenizer.eos_token_id,
                     pad_id=tokenizer.pad_token_id, draws=Draws.seeded(seed, len(prompt_ids)))
    return [Group(slot=g, example=e, version=version, worker_id="test",
                  token_ids=samples.completion_ids[g * group_size:(g + 1) * group_size],
                  logprobs=samples.logprobs[g * group_size:(g + 1) * group_size], rewards=rewards(g))
            for g, e in enumerate(examples)]
