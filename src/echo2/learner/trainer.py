"""The learner: turns one batch of rollout groups into one learner step (policy v -> v + 1).

A step: rewards (plus DAPO's overlong shaping) -> group advantages -> a no-gradient pass for
what must be fixed before any update (the proximal policy's log-probs for the decoupled or no
correction, the reference log-probs for the KL term, the entropies that select EchoClips) ->
``epochs`` passes of ``minibatches`` optimizer updates, each accumulating gradients over
micro-batches. With the defaults that is one optimizer update per step.

Under torchrun every rank runs the same step on its share of the sequences
(:mod:`echo2.learner.distributed`); alone, the :class:`~echo2.learner.distributed.Shard` is inert.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.config import LearnerConfig, RolloutConfig
from echo2.exchange import Group
from echo2.learner.distributed import Shard, announce, idle_pass, place_state, refresh_policy, shard_model
from echo2.learner.logprobs import CompletionScores, completion_scores
from echo2.learner.objectives import (
    EchoClipSettings,
    ObjectiveSettings,
    TokenBatch,
    Totals,
    candidates,
    clip_length,
    degeneration,
    delimiter_ids,
    group_advantages,
    implausible_rows,
    objective_loss,
    overlong_penalty,
    resolve_objective,
)
from echo2.learner.optimizer import build_optimizer
from echo2.learner.precision import ComputePrecision
from echo2.learner.tally import IMPLAUSIBLE, NONFINITE, Tally
from echo2.learner.update import apply_update
from echo2.model.lora import MergedCopy, has_adapter


def _pad_right(rows: Sequence[Sequence[float] | torch.Tensor], width: int,
               device: torch.device | None = None) -> torch.Tensor:
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row)
    return out


def _chunks(rows: list[int], size: int) -> list[list[int]]:
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def _split(rows: range, parts: int) -> list[list[int]]:
    """``rows`` in ``parts`` contiguous chunks of nearly equal size (empty ones when rows run out)."""
    return [chunk.tolist() for chunk in torch.tensor_split(torch.tensor(rows, dtype=torch.long), parts)]


def objective_settings(config: LearnerConfig, tokenizer: PreTrainedTokenizerBase) -> ObjectiveSettings:
    """The loss's settings from the learner config (EchoClip's step delimiters as token ids)."""
    echo = config.echoclip
    echoclip = EchoClipSettings(
        weight=echo.weight, objective=echo.objective, clip=echo.clip, scope=echo.scope,
        step_entropy=echo.step_entropy, success_reward=config.success_reward,
        delimiters=delimiter_ids(tokenizer, echo.step_delimiters),
    ) if echo.enabled else None
    resolve_objective(config.loss)  # one of the user's own that cannot be imported fails here, before a step
    return ObjectiveSettings(name=config.loss, clip_low=config.clip_low, clip_high=config.clip_high,
                             ratio_cap=config.ratio_cap, correction=config.correction,
                             kl_coef=config.kl_coef, entropy_coef=config.entropy_coef, echoclip=echoclip)


def require_finite(model: torch.nn.Module, version: int) -> None:
    """Refuse to publish ``version`` if any parameter is not finite: workers would sample from it
    and crash, and the run could not go on (the last line of defence after the step's own checks)."""
    finite = torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()
    if not bool(finite):
        raise RuntimeError(f"a parameter is not finite after the step to version {version}: not publishing it")


@dataclass
class Rollouts:
    """A step's completions, flattened group by group (the batch's groups, then the echo-only
    groups, see :meth:`Learner.step`): row ``g * G + i`` is completion i of group g, except where an
    agent's episode is trained as several segments (:attr:`episode_of`)."""

    prompts: list[list[int]]
    completions: list[list[int]]
    behaviour: list[list[float]]
    rewards: torch.Tensor
    """[groups, G] verified rewards, one per episode."""
    episode_of: torch.Tensor
    """Per row: its episode's index in ``rewards.flatten()`` (advantages are the episode's)."""
    trained: int
    """Rows of the batch proper; the rows after them are echo-only."""
    model_masks: list[list[int]]
    """Per row: 1 at the tokens the model sampled, 0 at those an environment inserted (episodes:
    context the model saw, never trained on or counted)."""

    @classmethod
    def from_groups(cls, groups: Sequence[Group], tokenizer: PreTrainedTokenizerBase,
                    echo_groups: Sequence[Group] = ()) -> Rollouts:
        every = [*groups, *echo_groups]
        texts = [g.example.prompt for g in every if g.prompt_ids is None]  # encoded in one batch
        encoded = iter(tokenizer(texts)["input_ids"] if texts else [])
        return cls(prompts=[ids for g in every for ids in g.prompt_rows(lambda _: next(encoded))],
                   completions=[tokens for g in every for tokens in g.token_ids],
                   behaviour=[logprobs for g in every for logprobs in g.logprobs],
                   rewards=torch.tensor([g.rewards for g in every], dtype=torch.float32),
                   episode_of=torch.tensor([k * len(g.rewards) + e for k, g in enumerate(every)
                                            for e in g.episode_rows()], dtype=torch.long),
                   trained=sum(len(g.token_ids) for g in groups),
                   model_masks=[g.model_mask(i) for g in every for i in range(len(g.token_ids))])

    def model_tokens(self, row: int) -> int:
        return sum(self.model_masks[row])

    @property
    def lengths(self) -> torch.Tensor:
        """[groups, G] the model's tokens in each episode (its segments together; inserted tokens not counted)."""
        per_row = torch.tensor([sum(m) for m in self.model_masks], dtype=torch.long)
        return torch.zeros(self.rewards.numel(), dtype=torch.long).index_add_(0, self.episode_of, per_row).reshape(
            self.rewards.shape)


@dataclass
class Anchors:
    """What is fixed before the step's first update, per row: log-probs of the proximal policy
    (the learner's at the start of the step; decoupled correction or none) and of the reference policy
    (KL term), and EchoClip lengths."""

    proximal: dict[int, torch.Tensor] = field(default_factory=dict)
    reference: dict[int, torch.Tensor] = field(default_factory=dict)
    clips: dict[int, int] = field(default_factory=dict)


class Learner:
    """Model + AdamW + the configured objective. Sequences whose advantage is exactly zero (groups
    in which every completion got the same reward) carry no policy gradient, so unless a KL term,
    an entropy bonus or an EchoClip needs them they are counted in the normalisers but never run
    through the model."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: LearnerConfig,
                 rollout: RolloutConfig, model_dir: str | None = None, shard: Shard = Shard(),
                 compute_dtype: str = "float32") -> None:
        self.tokenizer, self.config, self.rollout, self.shard = tokenizer, config, rollout, shard
        self.precision = ComputePrecision(compute_dtype, next(model.parameters()).device.type)
        """Autocast context of every forward pass on the policy (training, evaluation, verification)."""
        self.reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
        self.model, self.policy = shard_model(model, shard)
        """``model`` trains (sharded under FSDP); ``policy`` is the whole current policy that rank 0
        evaluates, verifies with, publishes and checkpoints (the same module unless FSDP)."""
        self._merged: MergedCopy | None = None
        self.settings = objective_settings(config, tokenizer)
        self.optimizer = build_optimizer(self.model, config, model_dir, shard)
        self.suspects: dict[int, str] = {}
        """After a step: the groups it left out, and why (see :meth:`train_step`)."""
        warmup = config.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )

    def sampling_policy(self) -> torch.nn.Module:
        """The current policy to sample from (evaluation): ``policy`` itself, or for a LoRA policy
        a merged copy, as workers sample from (:class:`~echo2.model.lora.MergedCopy`)."""
        if not has_adapter(self.policy):
            return self.policy
        if self._merged is None:
            self._merged = MergedCopy(self.policy)
        return self._merged.refresh()

    def step(self, groups: list[Group], version: int, echo_groups: Sequence[Group] = ()) -> dict[str, Any]:
        """One learner step on ``groups``, trained at policy ``version``; returns its metrics.

        ``echo_groups``: degenerate groups left out of the batch (DAPO's dynamic sampling filtered
        them) that EchoClip may still learn from. They get no policy gradient, KL or entropy term
        and do not count in the objective's normalisers.
        """
        announce(self.shard, "train_step", groups, version, tuple(echo_groups))
        return self.train_step(groups, version, echo_groups)

    def optimizer_state(self) -> dict:
        """AdamW's state, whole (under FSDP every rank gathers its shards)."""
        announce(self.shard, "optimizer_state")
        state = self.optimizer.state_dict()
        if self.shard.fsdp:
            state["state"] = {i: {k: self.shard.full(v) for k, v in s.items()} for i, s in state["state"].items()}
        return state

    def load_optimizer_state(self, state: dict) -> None:
        """Load a whole AdamW state (sharded like the parameters under FSDP)."""
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.optimizer.load_state_dict({**state, "state": place_state(state["state"], parameters, self.shard)})

    def train_step(self, groups: list[Group], version: int, echo_groups: Sequence[Group] = ()) -> dict[str, Any]:
        """:meth:`step` on this rank's share of the sequences (every rank calls it). Afterwards
        ``suspects`` maps the index (in ``[*groups, *echo_groups]``) of every group left out of the
        step to why: the caller quarantines their workers."""
        started = time.perf_counter()
        rollouts = Rollouts.from_groups(groups, self.tokenizer, echo_groups)
        trained, total = rollouts.trained, len(rollouts.completions)
        buffer = self.config.overlong_tokens(self.rollout.max_new_tokens)
        penalty = overlong_penalty(rollouts.lengths, self.rollout.max_new_tokens, buffer, self.config.overlong_penalty)
        advantages = group_advantages(rollouts.rewards + penalty, self.config.std_normalize).flatten()[rollouts.episode_of]
        advantages[trained:] = 0.0
        echo = self.settings.echoclip
        clip_rows = candidates(rollouts.rewards, echo).flatten()[rollouts.episode_of].tolist() if echo else [False] * total
        dense = self.config.kl_coef > 0 or self.config.entropy_coef > 0
        active = [i for i in range(total) if clip_rows[i] or (i < trained and (advantages[i] != 0 or dense))]
        mine = self.shard.mine(active)
        self.model.train()
        anchors = self._anchors(rollouts, mine, [i for i in mine if clip_rows[i]])
        tally = Tally(entropies=self.config.entropy_coef > 0, echoclip=echo is not None)
        parts = min(self.config.minibatches, trained)
        for _ in range(self.config.epochs):
            for chunk, echo_chunk in zip(_split(range(trained), parts), _split(range(trained, total), parts)):
                self._update(rollouts, advantages, chunk, echo_chunk, set(mine), anchors, tally)
        self.scheduler.step()
        self.model.eval()
        refresh_policy(self.model, self.policy, self.shard)
        if self.shard.world > 1:
            for other in self.shard.gather(tally)[1:]:
                tally.absorb(other)
        owner = [g for g, group in enumerate([*groups, *echo_groups]) for _ in group.token_ids]
        self.suspects = {}
        for row, why in sorted(tally.suspects.items()):
            self.suspects.setdefault(owner[row], why)
        rewards = rollouts.rewards[: len(groups)]
        degenerate = degeneration(rewards, self.config.success_reward)
        staleness = [version - g.version for g in groups]
        token_staleness = Counter(version - v for g in groups for i in range(len(g.token_ids))
                                  for v in g.token_versions(i) if v is not None)  # in-flight updates: fresher tokens
        model_tokens = sum(token_staleness.values()) or 1
        return {
            **tally.metrics(self.config.epochs * parts),
            "reward_mean": float(rewards.mean()),
            "reward_std_in_group": float(rewards.std(dim=1).mean()),
            "degenerate_group_fraction": float((rewards.std(dim=1) == 0).float().mean()),
            "degenerate_all_correct_fraction": float(degenerate.all_correct.float().mean()),
            "degenerate_all_wrong_fraction": float(degenerate.all_wrong.float().mean()),
            **({"overlong_penalty_mean": float(penalty[: len(groups)].mean())} if buffer else {}),
            **({"echoclip_clips": len(anchors.clips), "echoclip_tokens": sum(anchors.clips.values())} if echo else {}),
            "response_length": sum(rollouts.model_tokens(i) for i in range(trained)) / trained,
            "group_lengths": rollouts.lengths[: len(groups)].tolist(),
            "lr": self.scheduler.get_last_lr()[0],
            "trained_sequences": len(active),
            "samples": trained,
            "staleness_mean": sum(staleness) / len(staleness),
            "staleness_max": max(staleness),
            **{f"staleness_count_{s}": staleness.count(s) for s in sorted(set(staleness))},
            **{f"token_staleness_share_{s}": n / model_tokens for s, n in sorted(token_staleness.items())},
            "groups_spanning_versions": sum(len(g.versions()) > 1 for g in groups),
            "train_seconds": time.perf_counter() - started,
        }

    def _scores(self, model: PreTrainedModel, rollouts: Rollouts, rows: list[int],
                entropies: bool = False) -> CompletionScores:
        with self.precision():
            return completion_scores(model, [rollouts.prompts[i] for i in rows],
                                     [rollouts.completions[i] for i in rows], pad_id=self.tokenizer.pad_token_id,
                                     temperature=self.rollout.temperature, entropies=entropies)

    @torch.no_grad()
    def _anchors(self, rollouts: Rollouts, active: list[int], clip_rows: list[int]) -> Anchors:
        """Anchors of this rank's ``active`` rows; EchoClip lengths are shared with every rank
        (the update's normaliser counts every clip)."""
        anchors = Anchors()
        proximal, clip_set = self.settings.uses_proximal, set(clip_rows)
        for rows in self.shard.padded(_chunks(active if proximal else clip_rows, self.config.micro_batch)):
            if not rows:
                idle_pass(self.model, backward=False)
                continue
            scores = self._scores(self.model, rollouts, rows, entropies=not clip_set.isdisjoint(rows))
            for k, row in enumerate(rows):
                n = len(rollouts.completions[row])
                if proximal:
                    anchors.proximal[row] = scores.logprobs[k, :n]
                if row in clip_set:
                    assert scores.entropies is not None and self.settings.echoclip is not None
                    own = torch.tensor(rollouts.model_masks[row], dtype=scores.entropies.dtype,
                                       device=scores.entropies.device)  # cut only at the model's own tokens
                    anchors.clips[row] = clip_length(scores.entropies[k, :n] * own, rollouts.completions[row],
                                                     self.settings.echoclip)
        if self.reference is not None:
            for rows in _chunks(active, self.config.micro_batch):
                scores = self._scores(self.reference, rollouts, rows)
                for k, row in enumerate(rows):
                    anchors.reference[row] = scores.logprobs[k, : len(rollouts.completions[row])]
        if self.shard.world > 1 and self.settings.echoclip is not None:
            anchors.clips = {row: n for part in self.shard.gather(anchors.clips) for row, n in part.items()}
        return anchors

    def _update(self, rollouts: Rollouts, advantages: torch.Tensor, chunk: list[int], echo_chunk: list[int],
                active: set[int], anchors: Anchors, tally: Tally) -> None:
        """One optimizer update on the batch's sequences ``chunk`` and the echo-only ``echo_chunk``
        (those in ``active``, this rank's share, run through the model; the normalisers count all)."""
        self.optimizer.zero_grad(set_to_none=True)
        totals = Totals(sequences=len(chunk), tokens=sum(rollouts.model_tokens(i) for i in chunk),
                        budget=self.rollout.max_new_tokens, clips=sum(i in anchors.clips for i in chunk + echo_chunk))
        for rows in self.shard.padded(_chunks([i for i in chunk + echo_chunk if i in active], self.config.micro_batch)):
            if not rows:
                idle_pass(self.model, backward=True)
                continue
            batch = self._token_batch(rollouts, advantages, rows, anchors)
            batch = self._without_implausible(batch, rows, tally)
            terms = objective_loss(batch, self.settings, totals)
            self.shard.scaled(terms.loss).backward()
            tally.add(terms)
        norm = apply_update(self.optimizer, self.config.grad_clip, self.shard)
        if norm is None:  # whatever slipped past the checks: never applied
            tally.refused_updates += 1
            tally.suspects.update({row: NONFINITE for row in chunk + echo_chunk if row in active})
            return
        tally.grad_norms.append(norm)

    @staticmethod
    def _without_implausible(batch: TokenBatch, rows: list[int], tally: Tally) -> TokenBatch:
        """``batch`` with its implausible rows (:func:`implausible_rows`) masked out, noted in ``tally``:
        they take no part in the loss, and their workers are quarantined after the step."""
        real = batch.mask if batch.clip_mask is None else torch.maximum(batch.mask, batch.clip_mask)
        bad = implausible_rows(batch.logprobs, batch.behaviour, real)
        if not bool(bad.any()):
            return batch
        tally.suspects.update({rows[k]: IMPLAUSIBLE for k in bad.nonzero().flatten().tolist()})
        keep = (~bad)[:, None].to(batch.mask.dtype)
        return replace(batch, mask=batch.mask * keep,
                       clip_mask=None if batch.clip_mask is None else batch.clip_mask * keep)

    def _token_batch(self, rollouts: Rollouts, advantages: torch.Tensor, rows: list[int],
                     anchors: Anchors) -> TokenBatch:
        scores = self._scores(self.model, rollouts, rows, entropies=self.config.entropy_coef > 0)
        width, device = scores.mask.shape[1], scores.mask.device
        own = _pad_right([rollouts.model_masks[i] for i in rows], width, device)  # the model's tokens, not inserted
        mask = scores.mask * own
        if rows[-1] >= rollouts.trained:  # echo-only rows (they come last) take no part in the objective
            mask = mask * (torch.tensor(rows, device=device) < rollouts.trained)[:, None]

        def stacked(per_row: dict[int, torch.Tensor]) -> torch.Tensor | None:
            return _pad_right([per_row[i] for i in rows], width, device) if per_row else None

        clips = [[1.0] * anchors.clips.get(i, 0) for i in rows]
        clip_mask = _pad_right(clips, width, device) * own if anchors.clips else None
        behaviour = _pad_right([rollouts.behaviour[i] for i in rows], width, device)
        return TokenBatch(logprobs=scores.logprobs, behaviour=behaviour,
                          advantages=advantages[rows].to(device), mask=mask, proximal=stacked(anchors.proximal),
                          reference=stacked(anchors.reference), entropies=scores.entropies, clip_mask=clip_mask)
