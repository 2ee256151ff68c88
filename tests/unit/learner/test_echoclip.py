"""EchoClip: which rollouts, which tokens, the auxiliary loss, and no effect without degenerate groups."""

import copy
import math

import pytest
import torch
from sampled_groups import sampled_groups

from echo2.config import load_config
from echo2.learner.objectives import (
    EchoClipSettings,
    ObjectiveSettings,
    TokenBatch,
    Totals,
    candidates,
    clip_length,
    delimiter_ids,
    objective_loss,
)
from echo2.learner.objectives.echoclip import echoclip_loss, step_ends
from echo2.learner.trainer import Learner
from echo2.model.loading import load_model, load_tokenizer

SETTINGS = EchoClipSettings(weight=0.5)


def test_candidates_are_success_rollouts_of_all_success_groups():
    rewards = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert candidates(rewards, SETTINGS).tolist() == [True, True, False, False, False, False]
    every_success = EchoClipSettings(weight=0.5, scope="success")
    assert candidates(rewards, every_success).tolist() == [True, True, True, False, False, False]


def test_steps_end_after_each_delimiter_and_at_the_end():
    assert step_ends([5, 9, 7, 9, 3], frozenset({9})) == [2, 4, 5]
    assert step_ends([5, 9], frozenset({9})) == [2]
    assert step_ends([5, 7, 3], frozenset({9})) == [3]  # no delimiter: one step
    assert step_ends([5, 7, 3], frozenset()) == [1, 2, 3]  # no delimiters configured: token steps


def test_clip_ends_with_the_highest_entropy_step():
    # steps [5 5 9] and [4]: token entropies 0.4, 0.4, 0.4 | 0.6
    tokens, entropies = [5, 5, 9, 4], torch.tensor([0.4, 0.4, 0.4, 0.6])

    def length(step_entropy: str) -> int:
        settings = EchoClipSettings(weight=1.0, step_entropy=step_entropy, delimiters=frozenset({9}))
        return clip_length(entropies, tokens, settings)

    assert length("mean") == 4  # 0.4 vs 0.6: the whole rollout
    assert length("max") == 4
    assert length("sum") == 3  # 1.2 vs 0.6: the first step only
    token_steps = EchoClipSettings(weight=1.0)
    assert clip_length(torch.tensor([0.1, 0.9, 0.3]), [5, 6, 7], token_steps) == 2  # up to the peak token
    assert clip_length(torch.tensor([0.5, 0.5]), [5, 6], token_steps) == 1  # ties: the earliest


def test_delimiters_are_found_in_the_vocabulary():
    tokenizer = load_tokenizer("echo2/tiny-arith")
    assert delimiter_ids(tokenizer, ["="]) == {tokenizer.convert_tokens_to_ids("=")}
    assert delimiter_ids(tokenizer, []) == frozenset()


def test_auxiliary_losses_hand_computed():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, 0.0, 0.0]])
    clip_mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # row 1 has no clip
    # nll: 0.5 * mean(1, 2) over 1 clip
    assert echoclip_loss(logprobs, torch.zeros(2, 3), clip_mask, SETTINGS, clips=1).item() == pytest.approx(0.75)
    # clipped (A = 1, clip 0.2): ratios 1.5 -> 1.2, 0.5 -> 0.5; -(1.2 + 0.5) / 2, weight 0.5, 2 clips in the update
    clipped = EchoClipSettings(weight=0.5, objective="clipped", clip=0.2)
    ratios = torch.tensor([[math.log(1.5), math.log(0.5), 0.0], [0.0, 0.0, 0.0]])
    value = echoclip_loss(ratios, torch.zeros(2, 3), clip_mask, clipped, clips=2).item()
    assert value == pytest.approx(0.5 * -(1.2 + 0.5) / 2 / 2)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo", "gspo"])
@pytest.mark.parametrize("decoupled", [False, True])
def test_composes_with_every_objective(name, decoupled):
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]])
    clip_mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    batch = TokenBatch(logprobs=logprobs, behaviour=logprobs - 0.1, advantages=torch.tensor([0.7, -0.7]),
                       mask=torch.ones(2, 2), proximal=logprobs - 0.05 if decoupled else None)
    totals = Totals(sequences=2, tokens=4, budget=4, clips=1)
    plain = objective_loss(batch, ObjectiveSettings(name, correction="decoupled" if decoupled else "truncated"), totals)
    batch.clip_mask = clip_mask
    echo = objective_loss(batch, ObjectiveSettings(name, correction="decoupled" if decoupled else "truncated", echoclip=SETTINGS), totals)
    assert echo.loss.item() == pytest.approx(plain.loss.item() + 0.5 * 1.0)  # nll of the one clip token
    assert echo.echoclip_tokens == 1 and echo.echoclip_loss == pytest.approx(0.5)


# --- on the learner ------------------------------------------------------------------------------
def _learners(*overrides: str) -> tuple[Learner, Learner]:
    """Two learners on copies of the shipped model: plain, and with ``overrides``."""
    torch.manual_seed(0)
    base = ["learner.lr=1e-3", "learner.warm_start_optimizer=false", "rollout.group_size=4"]
    plain_config, echo_config = load_config(overrides=base), load_config(overrides=[*base, *overrides])
    model, tokenizer = load_model(plain_config.model.name), load_tokenizer(plain_config.model.name)
    return (Learner(model, tokenizer, plain_config.learner, plain_config.rollout),
            Learner(copy.deepcopy(model), tokenizer, echo_config.learner, echo_config.rollout))


def _same_parameters(a: Learner, b: Learner, atol: float = 0.0) -> bool:
    return all(torch.allclose(p, q, rtol=0.0, atol=atol) for p, q in zip(a.model.parameters(), b.model.parameters()))


def _differing_fraction(a: Learner, b: Learner, atol: float) -> float:
    """Share of parameter elements of ``a`` and ``b`` that differ by more than ``atol``."""
    differing = total = 0
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        differing += int(((p - q).abs() > atol).sum())
        total += p.numel()
    return differing / total


def test_no_effect_when_no_group_is_degenerate():
    plain, echo = _learners("learner.echoclip.enabled=true", "learner.echoclip.weight=1.0")
    groups = sampled_groups(plain.model, plain.tokenizer, 6, 4, lambda g: [1.0, 0.0, 1.0, 0.0])
    plain.step(groups, version=0)
    record = echo.step(groups, version=0)
    assert _same_parameters(plain, echo)
    assert record["echoclip_tokens"] == 0 and record["echoclip_loss"] == 0.0


def test_degenerate_success_groups_train_through_echoclip():
    plain, echo = _learners("learner.echoclip.enabled=true", "learner.echoclip.weight=1.0")
    groups = sampled_groups(plain.model, plain.tokenizer, 4, 4, lambda g: [1.0] * 4 if g < 2 else [0.0] * 4)
    before = copy.deepcopy(plain.model.state_dict())
    assert plain.step(groups, version=0)["trained_sequences"] == 0  # every advantage is zero
    assert all(torch.equal(before[k], v) for k, v in plain.model.state_dict().items())
    record = echo.step(groups, version=0)
    assert record["degenerate_all_correct_fraction"] == 0.5 and record["degenerate_all_wrong_fraction"] == 0.5
    assert record["echoclip_clips"] == 8  # the 2 all-success groups' rollouts; all-wrong ones give none
    assert 8 <= record["echoclip_tokens"] <= sum(len(t) for g in groups[:2] for t in g.token_ids)
    assert record["echoclip_loss"] > 0 and not _same_parameters(plain, echo)


def test_groups_filtered_by_dynamic_sampling_feed_echoclip_only():
    dapo = ["learner.loss=dapo", "learner.echoclip.enabled=true", "learner.kl_coef=0.1", "learner.entropy_coef=0.01"]
    reference, silent = _learners(*dapo, "learner.echoclip.weight=0.0")
    reference = Learner(reference.model, reference.tokenizer, silent.config, silent.rollout)
    batch = sampled_groups(silent.model, silent.tokenizer, 3, 4, lambda g: [1.0, 0.0, 0.0, 1.0])
    filtered = sampled_groups(silent.model, silent.tokenizer, 2, 4, lambda g: [1.0] * 4, seed=1)
    echo = _learners(*dapo, "learner.echoclip.weight=1.0")[1]
    reference.step(batch, version=0)
    record = silent.step(batch, version=0, echo_groups=filtered)
    # weight 0: the filtered groups change nothing (no policy gradient, KL or entropy term, no normaliser);
    # up to float error, since they share micro-batches (and so padding) with the batch — which Adam
    # can amplify to a full step on a coordinate whose gradient is ~0, hence "almost every parameter"
    assert _differing_fraction(reference, silent, atol=1e-6) < 0.001
    assert record["samples"] == 12 and record["echoclip_clips"] == 8
    assert echo.step(batch, version=0, echo_groups=filtered)["echoclip_loss"] > 0
    assert _differing_fraction(reference, echo, atol=1e-6) > 0.1
