"""Held-out evaluation: greedy exact-match accuracy and the mean reward of temperature samples."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.rollout.sampler import sample
from echo2.tasks import Example, Task


@dataclass
class EvalResult:
    accuracy: float
    """Fraction of held-out prompts whose greedy completion is exactly right."""
    sampled_reward: float
    """Mean training reward of one temperature-``T`` sample per held-out prompt."""
    examples: list[tuple[str, str, float]] = field(default_factory=list)
    """A few (prompt, greedy completion, reward) triples to show."""


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    examples: list[Example],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    batch_size: int = 512,
    seed: int = 0,
    shown: int = 4,
) -> EvalResult:
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    correct, reward_sum, shown_examples = 0, 0.0, []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompt_ids = [tokenizer(e.prompt)["input_ids"] for e in chunk]
        common = dict(max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
        greedy = sample(model, prompt_ids, greedy=True, **common)
        sampled = sample(model, prompt_ids, temperature=temperature, generator=generator, **common)
        greedy_text = tokenizer.batch_decode(greedy.completion_ids, skip_special_tokens=True)
        sampled_text = tokenizer.batch_decode(sampled.completion_ids, skip_special_tokens=True)
        for example, text, sampled_completion in zip(chunk, greedy_text, sampled_text):
            correct += task.is_correct(example, text)
            reward_sum += task.reward(example, sampled_completion)
            if len(shown_examples) < shown:
                shown_examples.append((example.prompt, text, task.reward(example, text)))
    model.train(was_training)
    n = max(1, len(examples))
    return EvalResult(accuracy=correct / n, sampled_reward=reward_sum / n, examples=shown_examples)
