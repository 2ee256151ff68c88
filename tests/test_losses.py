"""GRPO advantages and loss against values computed by hand."""

import math

import pytest
import torch

from echo2.learner.losses import group_advantages, grpo_loss


def test_group_advantages_hand_computed():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    # group 1: mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    adv = group_advantages(rewards)
    assert adv[0].tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # degenerate group: no signal
    centred = group_advantages(rewards, std_normalize=False)
    assert centred[0].tolist() == [0.5, -0.5, -0.5, 0.5]


def _loss(logp, behaviour, adv, mask, **kw):
    options = dict(total_sequences=len(adv), clip_low=0.2, clip_high=0.2, ratio_cap=3.0)
    options.update(kw)
    return grpo_loss(torch.tensor(logp), torch.tensor(behaviour), torch.tensor(adv), torch.tensor(mask), **options)


def test_on_policy_loss_is_minus_mean_advantage():
    # ratio 1 everywhere: per-token surrogate = A; sequence means; batch mean -> -(1 + -0.5)/2
    terms = _loss([[-1.0, -2.0], [-0.5, 0.0]], [[-1.0, -2.0], [-0.5, 0.0]], [1.0, -0.5], [[1, 1], [1, 0]])
    assert terms.loss.item() == pytest.approx(-0.25)
    assert terms.ratio_mean == pytest.approx(1.0)
    assert terms.clip_fraction == 0.0


def test_clipping_and_ratio_cap_hand_computed():
    r_hi = math.log(1.5)  # ratio 1.5
    r_huge = math.log(5.0)  # ratio 5
    # seq 0: A=+1, ratio 1.5 -> min(1.5, 1.2) = 1.2 (clipped, no gradient)
    # seq 1: A=-1, ratio 5 -> min(-5, -1.2) = -5, dual clip: max(-5, 3 * -1) = -3
    terms = _loss([[r_hi], [r_huge]], [[0.0], [0.0]], [1.0, -1.0], [[1], [1]])
    assert terms.loss.item() == pytest.approx(-(1.2 + -3.0) / 2)
    assert terms.ratio_max == pytest.approx(5.0)
    assert terms.clip_fraction == pytest.approx(0.5)  # only the positive-advantage token lost its gradient


def test_gradient_vanishes_when_clipped_and_flows_otherwise():
    logp = torch.tensor([[math.log(1.5)], [0.0]], requires_grad=True)
    terms = grpo_loss(logp, torch.zeros(2, 1), torch.tensor([1.0, 1.0]), torch.ones(2, 1), total_sequences=2,
                      clip_low=0.2, clip_high=0.2, ratio_cap=3.0)
    terms.loss.backward()
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[1, 0].item() == pytest.approx(-0.5)  # d/dlogp of -(exp(logp) * 1) / 2 at ratio 1


def test_kl_term_k3():
    # reference logp 0, policy logp -1: k3 = exp(1) - 1 - 1
    terms = _loss([[-1.0]], [[-1.0]], [0.0], [[1]], kl_coef=0.5, reference_logprobs=torch.tensor([[0.0]]))
    assert terms.kl == pytest.approx(math.e - 2)
    assert terms.loss.item() == pytest.approx(0.5 * (math.e - 2))
