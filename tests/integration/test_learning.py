"""The learner really ascends the reward: GRPO on a reward any policy can learn quickly.

Reward 1 when a completion starts with the digit 1 (a behaviour, not a skill): the shipped model
starts about 30% of its samples that way; thirty GRPO steps must raise that by a wide margin.
This exercises the sampler, the log-prob recomputation, the advantages, the loss and AdamW
together, in one process.
"""

import torch

from echo2.config import load_config
from echo2.exchange import Group
from echo2.learner.trainer import Learner
from echo2.model.draws import Draws
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.sampling import sample
from echo2.tasks import ArithmeticTask


def starts_with_one(text: str) -> float:
    return 1.0 if text.strip().startswith("1") else 0.0


def test_grpo_raises_a_learnable_reward():
    torch.manual_seed(0)
    config = load_config(overrides=["learner.lr=1e-4", "learner.groups_per_step=64", "learner.warm_start_optimizer=false"])
    model, tokenizer = load_model(config.model.name), load_tokenizer(config.model.name)
    learner = Learner(model, tokenizer, config.learner, config.rollout)
    stream = ArithmeticTask().train_examples(seed=5)
    group_size = config.rollout.group_size
    rewards = []
    for step in range(30):
        examples = [next(stream) for _ in range(config.learner.groups_per_step)]
        prompt_ids = [tokenizer(e.prompt)["input_ids"] for e in examples for _ in range(group_size)]
        samples = sample(model, prompt_ids, max_new_tokens=8, eos_id=tokenizer.eos_token_id,
                         pad_id=tokenizer.pad_token_id, draws=Draws.seeded(step, len(prompt_ids)))
        texts = tokenizer.batch_decode(samples.completion_ids, skip_special_tokens=True)
        groups = [
            Group(slot=i, example=e, version=step, worker_id="test",
                  token_ids=samples.completion_ids[i * group_size:(i + 1) * group_size],
                  logprobs=samples.logprobs[i * group_size:(i + 1) * group_size],
                  rewards=[starts_with_one(t) for t in texts[i * group_size:(i + 1) * group_size]])
            for i, e in enumerate(examples)
        ]
        rewards.append(learner.step(groups, version=step)["reward_mean"])
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.15, (first, last)
