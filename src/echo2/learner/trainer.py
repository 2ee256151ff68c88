"""The learner: turns one batch of rollout groups into one optimizer step (policy v -> v + 1)."""

from __future__ import annotations

import copy
import time
from collections import Counter

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.config import LearnerConfig, RolloutConfig
from echo2.coordinator.state import Group
from echo2.learner.logprobs import completion_logprobs
from echo2.learner.losses import LOSSES, group_advantages
from echo2.learner.optimizer import build_optimizer


def _pad_right(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


class Learner:
    """Model + AdamW + the configured loss. Sequences whose advantage is exactly zero (groups in
    which every completion got the same reward) carry no policy gradient, so without a KL term
    they are counted in the mean but never run through the model."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: LearnerConfig,
                 rollout: RolloutConfig, model_dir: str | None = None) -> None:
        self.model, self.tokenizer, self.config, self.rollout = model, tokenizer, config, rollout
        self.loss_fn = LOSSES[config.loss]
        self.optimizer = build_optimizer(model, config, model_dir)
        warmup = config.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None

    def step(self, groups: list[Group], version: int) -> dict[str, float]:
        """One optimizer step on ``groups``, trained at policy ``version``; returns its metrics."""
        started = time.perf_counter()
        rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)
        advantages = group_advantages(rewards, self.config.std_normalize).flatten()
        prompts, completions, behaviour = [], [], []
        prompt_ids = self.tokenizer([g.example.prompt for g in groups])["input_ids"]
        for group, ids in zip(groups, prompt_ids):
            for tokens, logprobs in zip(group.token_ids, group.logprobs):
                prompts.append(ids)
                completions.append(tokens)
                behaviour.append(logprobs)
        total = len(completions)
        active = [i for i in range(total) if advantages[i] != 0 or self.reference is not None]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: Counter[str] = Counter()
        ratio_max, ratio_min = float("-inf"), float("inf")
        for start in range(0, len(active), self.config.micro_batch):
            rows = active[start : start + self.config.micro_batch]
            p, c = [prompts[i] for i in rows], [completions[i] for i in rows]
            logprobs, mask = completion_logprobs(self.model, p, c, pad_id=self.tokenizer.pad_token_id,
                                                 temperature=self.rollout.temperature)
            reference = None
            if self.reference is not None:
                with torch.no_grad():
                    reference, _ = completion_logprobs(self.reference, p, c, pad_id=self.tokenizer.pad_token_id,
                                                       temperature=self.rollout.temperature)
            terms = self.loss_fn(
                logprobs, _pad_right([behaviour[i] for i in rows], mask.shape[1]), advantages[rows], mask,
                total_sequences=total, clip_low=self.config.clip_low, clip_high=self.config.clip_high,
                ratio_cap=self.config.ratio_cap, kl_coef=self.config.kl_coef, reference_logprobs=reference,
            )
            terms.loss.backward()
            tokens = float(mask.sum())
            sums["tokens"] += tokens
            sums["ratio"] += terms.ratio_mean * tokens
            sums["clipped"] += terms.clip_fraction * tokens
            sums["kl"] += terms.kl * tokens
            sums["loss"] += terms.loss.item()
            ratio_max, ratio_min = max(ratio_max, terms.ratio_max), min(ratio_min, terms.ratio_min)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip))
        self.optimizer.step()
        self.scheduler.step()
        self.model.eval()
        trained_tokens = max(sums["tokens"], 1.0)
        degenerate = float((rewards.std(dim=1) == 0).float().mean())
        staleness = [version - g.version for g in groups]
        return {
            "loss": sums["loss"],
            "reward_mean": float(rewards.mean()),
            "reward_std_in_group": float(rewards.std(dim=1).mean()),
            "degenerate_group_fraction": degenerate,
            "response_length": sum(len(c) for c in completions) / total,
            "ratio_mean": sums["ratio"] / trained_tokens if active else 1.0,
            "ratio_max": ratio_max if active else 1.0,
            "ratio_min": ratio_min if active else 1.0,
            "clip_fraction": sums["clipped"] / trained_tokens,
            "kl": sums["kl"] / trained_tokens,
            "grad_norm": grad_norm,
            "lr": self.scheduler.get_last_lr()[0],
            "trained_sequences": len(active),
            "samples": total,
            "staleness_mean": sum(staleness) / len(staleness),
            "staleness_max": max(staleness),
            **{f"staleness_count_{s}": staleness.count(s) for s in sorted(set(staleness))},
            "train_seconds": time.perf_counter() - started,
        }
