"""Held-out evaluation: greedy exact-match accuracy and the mean reward of temperature samples.

Each held-out prompt is played as an episode (:mod:`echo2.model.episodes`) with the task answering
between turns itself: a single-turn task's episode is one greedy completion, exactly as before;
an episode of several turns is right when :meth:`~echo2.tasks.Task.episode_correct` says so, and
the accuracy of its first reply alone is reported beside it. Shown samples are whole episodes:
every reply, and each inserted answer in ``⟦ ⟧``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.model.draws import Draws
from echo2.model.episodes import Episode, observation_ids, run_episodes
from echo2.model.sampling import sample
from echo2.tasks import Example, Task


@dataclass
class EvalResult:
    accuracy: float
    """Fraction of held-out prompts whose greedy episode is right (one turn: exact match)."""
    sampled_reward: float | None
    """Mean training reward of one temperature-``T`` episode per held-out prompt (None: not played)."""
    examples: list[tuple[str, str, float]] = field(default_factory=list)
    """A few (prompt, greedy episode, reward) triples to show."""
    well_formed: float = 1.0
    """Fraction of greedy final replies in the format the prompt asks for (:meth:`Task.is_well_formed`)."""
    well_formed_accuracy: float | None = None
    """Accuracy among the well-formed greedy episodes (a gain only in format leaves it flat);
    None when none is well-formed."""
    greedy_tokens: float = 0.0
    """Mean number of tokens the model generated per greedy episode (EOS included)."""
    first_turn_accuracy: float | None = None
    """Episodes of several turns: the fraction whose first greedy reply alone is right."""
    turns: float | None = None
    """Episodes of several turns: mean model turns per greedy episode."""

    def metrics(self) -> dict[str, float]:
        """The figures every evaluation logs."""
        optional = {"eval_sampled_reward": self.sampled_reward,
                    "eval_well_formed_accuracy": self.well_formed_accuracy,
                    "eval_first_turn_accuracy": self.first_turn_accuracy, "eval_turns": self.turns}
        return {"eval_accuracy": self.accuracy, "eval_well_formed": self.well_formed,
                "eval_greedy_tokens": self.greedy_tokens,
                **{name: value for name, value in optional.items() if value is not None}}


def shown_episode(episode: Episode) -> str:
    """An episode as a line of text: the replies, each inserted answer between ``⟦ ⟧``."""
    parts = [episode.replies[0]]
    for observation, reply in zip(episode.observations, episode.replies[1:]):
        parts += [f" ⟦{observation}⟧ ", reply]
    return "".join(parts)


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
    sampled: bool = True,
) -> EvalResult:
    """Greedy accuracy of ``examples`` and, with ``sampled``, the mean reward of one temperature
    episode each (a second generation pass over the prompts, as long as the first)."""
    was_training = model.training
    model.eval()
    correct, first_correct, reward_sum, shown_examples = 0, 0, 0.0, []
    well_formed, well_formed_correct, greedy_tokens, turns = 0, 0, 0, 0
    window = getattr(model.config, "max_position_embeddings", None)
    common = dict(max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]

        def play(sample_kwargs: dict, draws: Draws | None = None) -> list[Episode]:
            return run_episodes(
                [tokenizer(e.prompt)["input_ids"] for e in chunk],
                sample=lambda contexts, draws: sample(model, contexts, **common, **sample_kwargs, draws=draws),
                respond=lambda rows, replies: [task.respond(chunk[row], said) for row, said in zip(rows, replies)],
                encode=lambda text: observation_ids(tokenizer, text),
                decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                max_turns=task.max_turns, version=lambda: 0,
                max_context=window - max_new_tokens if window else None, eos_id=tokenizer.eos_token_id,
                draws=draws)

        greedy = play({"greedy": True})
        draws = Draws([(seed, start + row) for row in range(len(chunk))])  # example i: row i of the eval's seed
        temperature_episodes = (play({"temperature": temperature}, draws) if sampled else [None] * len(chunk))
        for example, episode, sampled_episode in zip(chunk, greedy, temperature_episodes):
            right, formed = task.episode_correct(example, episode.replies), task.is_well_formed(episode.replies[-1])
            correct += right
            first_correct += task.is_correct(example, episode.replies[0])
            well_formed += formed
            well_formed_correct += right and formed
            greedy_tokens += sum(episode.mask)
            turns += episode.turns
            if sampled_episode is not None:
                reward_sum += task.episode_reward(example, sampled_episode.replies)
            if len(shown_examples) < shown * task.max_turns:  # candidates; episodes of several turns first
                shown_examples.append((task.display_prompt(example), shown_episode(episode),
                                       task.episode_reward(example, episode.replies)))
    model.train(was_training)
    shown_examples = sorted(shown_examples, key=lambda e: "⟦" not in e[1])[:shown]  # stable: in order otherwise
    n = max(1, len(examples))
    episodes = task.max_turns > 1
    return EvalResult(accuracy=correct / n, sampled_reward=reward_sum / n if sampled else None,
                      examples=shown_examples, well_formed=well_formed / n,
                      well_formed_accuracy=well_formed_correct / well_formed if well_formed else None,
                      greedy_tokens=greedy_tokens / n, first_turn_accuracy=first_correct / n if episodes else None,
                      turns=turns / n if episodes else None)
