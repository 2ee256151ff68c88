"""Held-out evaluation: greedy exact-match accuracy and the mean reward of temperature samples."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.generation import sample
from echo2.tasks import Example, Task


@dataclass
class EvalResult:
    accuracy: float
    """Fraction of held-out prompts whose greedy completion is exactly right."""
    sampled_reward: float
    """Mean training reward of one temperature-``T`` sample per held-out prompt."""
    examples: list[tuple[str, str, float]] = field(default_factory=list)
    """A few (prompt, greedy completion, reward) triples to show."""
    well_formed: float = 1.0
    """Fraction of greedy completions in the format the prompt asks for (:meth:`Task.is_well_formed`)."""
    well_formed_accuracy: float | None = None
    """Accuracy among the well-formed greedy completions (a gain only in format leaves it flat);
    None when no completion is well-formed."""
    greedy_tokens: float = 0.0
    """Mean length of the greedy completions in tokens (EOS included)."""

    def metrics(self) -> dict[str, float]:
        """The figures every evaluation logs."""
        return {"eval_accuracy": self.accuracy, "eval_sampled_reward": self.sampled_reward,
                "eval_well_formed": self.well_formed, "eval_greedy_tokens": self.greedy_tokens,
                **({} if self.well_formed_accuracy is None else {"eval_well_formed_accuracy": self.well_formed_accuracy})}


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
    well_formed, well_formed_correct, greedy_tokens = 0, 0, 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompt_ids = [tokenizer(e.prompt)["input_ids"] for e in chunk]
        common = dict(max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
        greedy = sample(model, prompt_ids, greedy=True, **common)
        sampled = sample(model, prompt_ids, temperature=temperature, generator=generator, **common)
        greedy_text = tokenizer.batch_decode(greedy.completion_ids, skip_special_tokens=True)
        sampled_text = tokenizer.batch_decode(sampled.completion_ids, skip_special_tokens=True)
        greedy_tokens += greedy.num_tokens
        for example, text, sampled_completion in zip(chunk, greedy_text, sampled_text):
            right, formed = task.is_correct(example, text), task.is_well_formed(text)
            correct += right
            well_formed += formed
            well_formed_correct += right and formed
            reward_sum += task.reward(example, sampled_completion)
            if len(shown_examples) < shown:
                shown_examples.append((task.display_prompt(example), text, task.reward(example, text)))
    model.train(was_training)
    n = max(1, len(examples))
    return EvalResult(accuracy=correct / n, sampled_reward=reward_sum / n, examples=shown_examples,
                      well_formed=well_formed / n,
                      well_formed_accuracy=well_formed_correct / well_formed if well_formed else None,
                      greedy_tokens=greedy_tokens / n)
