"""The objectives against values computed by hand: advantages, each loss, the corrections."""

import copy
import math

import pytest
import torch
from sampled_groups import sampled_groups

from echo2.config import load_config
from echo2.learner.objectives import (
    ObjectiveSettings,
    TokenBatch,
    Totals,
    degeneration,
    group_advantages,
    is_degenerate,
    objective_loss,
    overlong_penalty,
)
from echo2.learner.trainer import Learner
from echo2.model.loading import load_model, load_tokenizer

LOG = math.log


def test_group_advantages_hand_computed():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    # group 1: mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    adv = group_advantages(rewards)
    assert adv[0].tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # degenerate group: no signal
    centred = group_advantages(rewards, std_normalize=False)  # Dr.GRPO
    assert centred[0].tolist() == [0.5, -0.5, -0.5, 0.5]


def test_overlong_penalty_is_dapos_soft_punishment():
    # L_max = 10, L_cache = 4: no penalty up to 6 tokens, then linear to -1 at 10
    lengths = torch.tensor([[6, 7], [8, 10]])
    assert overlong_penalty(lengths, 10, 4).tolist() == [[0.0, -0.25], [-0.5, -1.0]]
    assert overlong_penalty(lengths, 10, 4, factor=0.5).tolist() == [[0.0, -0.125], [-0.25, -0.5]]
    assert overlong_penalty(lengths, 10, 0).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_degenerate_groups_all_correct_and_all_wrong():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.3, 0.3]])
    found = degeneration(rewards, success_reward=1.0)
    assert found.all_correct.tolist() == [True, False, False, False]
    assert found.all_wrong.tolist() == [False, True, False, True]  # equal partial credit: none correct
    assert [is_degenerate(r) for r in rewards.tolist()] == [True, True, False, True]


# --- one small batch, every objective ------------------------------------------------------------
# 4 sequences of 3, 2, 1 and 2 tokens; ratios pi_theta / pi_behav per token and advantages:
RATIOS = [[1.0, 1.5, 0.5], [2.0, 4.0], [1.1], [0.9, 1.0]]
ADVANTAGES = [1.0, -1.0, 0.5, 0.0]


def _batch(ratios=RATIOS, advantages=ADVANTAGES, **extra) -> TokenBatch:
    width = max(len(r) for r in ratios)
    logprobs, mask = torch.zeros(len(ratios), width), torch.zeros(len(ratios), width)
    for i, row in enumerate(ratios):
        logprobs[i, : len(row)] = torch.tensor([LOG(r) for r in row])
        mask[i, : len(row)] = 1.0
    return TokenBatch(logprobs=logprobs, behaviour=torch.zeros_like(logprobs), advantages=torch.tensor(advantages),
                      mask=mask, **extra)


def _totals(batch: TokenBatch, budget: int = 4) -> Totals:
    return Totals(sequences=len(batch.advantages), tokens=int(batch.mask.sum()), budget=budget)


def test_grpo_hand_computed():
    # clip 0.2, cap 3. seq 0 (A=+1): min(r, clip(r)) = 1, 1.2 (clipped), 0.5 -> mean -2.7 / 3
    # seq 1 (A=-1): min(-2, -1.2) = -2; min(-4, -1.2) = -4, dual clip at -3 -> mean 5 / 2
    # seq 2 (A=0.5): 0.55 -> -0.55; seq 3: A=0 -> 0. GRPO: mean over 4 sequences
    batch = _batch()
    terms = objective_loss(batch, ObjectiveSettings("grpo"), _totals(batch))
    assert terms.loss.item() == pytest.approx((-2.7 / 3 + 5 / 2 - 0.55) / 4)
    assert terms.ratio_mean == pytest.approx(12.0 / 8)
    assert (terms.stats.ratio_max, terms.stats.ratio_min) == pytest.approx((4.0, 0.5))
    assert terms.clip_fraction == pytest.approx(1 / 8)  # only the 1.5 of a positive advantage
    assert terms.stats.truncated == 1  # the 4.0 exceeds the cap


def test_dr_grpo_sums_tokens_over_a_constant():
    # same per-token values; token sum 1.75 over (4 sequences * budget 4)
    batch = _batch()
    terms = objective_loss(batch, ObjectiveSettings("dr_grpo"), _totals(batch, budget=4))
    assert terms.loss.item() == pytest.approx((-2.7 + 5 - 0.55) / 16)


def test_dapo_clip_higher_and_token_mean():
    # clip_high 0.28: the 1.5 clips at 1.28 -> seq 0 = -(1 + 1.28 + 0.5); token mean over 8 tokens
    batch = _batch()
    terms = objective_loss(batch, ObjectiveSettings("dapo", clip_high=0.28), _totals(batch))
    assert terms.loss.item() == pytest.approx((-2.78 + 5 - 0.55) / 8)


def test_gspo_sequence_ratio():
    # s_i = geometric mean of the token ratios; clip 3e-4 / 4e-4
    s0, s1, s2 = 0.75 ** (1 / 3), math.sqrt(8.0), 1.1
    expected = [-min(s0, 1 + 4e-4), -max(min(-s1, -(1 + 4e-4)), -3.0), -min(0.5 * s2, 0.5 * (1 + 4e-4)), 0.0]
    batch = _batch()
    terms = objective_loss(batch, ObjectiveSettings("gspo", clip_low=3e-4, clip_high=4e-4), _totals(batch))
    assert terms.loss.item() == pytest.approx(sum(expected) / 4)
    assert terms.stats.ratio_max == pytest.approx(s1)


def test_gspo_gradient_is_the_sequence_ratio_spread_over_tokens():
    # one sequence of 2 tokens, A = 1, s unclipped: d(-s)/dlogp_t = -s / |y|
    logprobs = torch.tensor([[LOG(1.0001), LOG(0.9999)]], requires_grad=True)
    batch = TokenBatch(logprobs=logprobs, behaviour=torch.zeros(1, 2), advantages=torch.tensor([1.0]),
                       mask=torch.ones(1, 2))
    objective_loss(batch, ObjectiveSettings("gspo", clip_low=3e-4, clip_high=4e-4), _totals(batch)).loss.backward()
    s = math.sqrt(1.0001 * 0.9999)
    assert logprobs.grad[0].tolist() == pytest.approx([-s / 2, -s / 2])


def test_truncated_weight_caps_a_stale_negative_token():
    # the behaviour policy is far behind: ratio 5 for A = -1. PPO alone would give -5; truncated at 3
    batch = _batch([[5.0]], [-1.0])
    terms = objective_loss(batch, ObjectiveSettings("grpo", ratio_cap=3.0), _totals(batch))
    assert terms.loss.item() == pytest.approx(3.0)
    assert terms.stats.weight_max == pytest.approx(5.0) and terms.stats.truncated == 1


def _stale_batch() -> TokenBatch:
    """Two sequences behind the proximal policy: pi_prox / pi_behav = 2, 5 and 0.5; pi_theta / pi_prox = 1.5, 1, 0.7."""
    behaviour = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    proximal = torch.tensor([[LOG(2.0), LOG(5.0)], [LOG(0.5), 0.0]])
    logprobs = proximal + torch.tensor([[LOG(1.5), 0.0], [LOG(0.7), 0.0]])
    return TokenBatch(logprobs=logprobs, behaviour=behaviour, advantages=torch.tensor([1.0, -1.0]),
                      mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]), proximal=proximal)


def test_decoupled_weights_hand_computed():
    # seq 0 (A=+1): pi_prox / pi_behav = 2, 5 (-> truncated at 3); pi_theta / pi_prox = 1.5, 1.0
    #   token 0: 2 * min(1.5, 1.2) = 2.4; token 1: 3 * 1 = 3 -> mean -2.7
    # seq 1 (A=-1): weight 0.5, r = 0.7: min(-0.7, -0.8) = -0.8 -> 0.5 * -0.8 -> 0.4
    batch = _stale_batch()
    settings = ObjectiveSettings("grpo", ratio_cap=3.0, correction="decoupled")
    terms = objective_loss(batch, settings, _totals(batch))
    assert terms.loss.item() == pytest.approx((-2.7 + 0.4) / 2)
    assert terms.stats.weight_sum / terms.stats.tokens == pytest.approx(2.5)  # mean of 2, 5, 0.5
    assert terms.stats.weight_max == pytest.approx(5.0) and terms.stats.truncated == 1
    assert terms.ratio_mean == pytest.approx((1.5 + 1.0 + 0.7) / 3)


def test_no_correction_ignores_the_behaviour_weight_but_still_reports_it():
    # same batch as above: without a correction each token counts once, r = pi_theta / pi_prox only
    #   seq 0 (A=+1): min(1.5, 1.2) = 1.2 and 1.0 -> mean -1.1; seq 1 (A=-1): min(-0.7, -0.8) = -0.8 -> 0.8
    batch = _stale_batch()
    terms = objective_loss(batch, ObjectiveSettings("grpo", ratio_cap=3.0, correction="none"), _totals(batch))
    assert terms.loss.item() == pytest.approx((-1.1 + 0.8) / 2)
    assert terms.stats.weight_max == pytest.approx(5.0) and terms.stats.truncated == 1


def test_decoupled_equals_truncated_when_nothing_is_stale_or_clipped():
    # pi_prox = pi_behav: weight 1, and with ratios inside the clip range both are -r A
    batch = _batch([[1.1, 0.9]], [0.5])
    truncated = objective_loss(batch, ObjectiveSettings("grpo"), _totals(batch))
    batch.proximal = batch.behaviour.clone()
    decoupled = objective_loss(batch, ObjectiveSettings("grpo", correction="decoupled"), _totals(batch))
    assert decoupled.loss.item() == pytest.approx(truncated.loss.item()) == pytest.approx(-0.5)


def test_gradient_vanishes_when_clipped_and_flows_otherwise():
    logp = torch.tensor([[LOG(1.5)], [0.0]], requires_grad=True)
    batch = TokenBatch(logprobs=logp, behaviour=torch.zeros(2, 1), advantages=torch.tensor([1.0, 1.0]),
                       mask=torch.ones(2, 1))
    objective_loss(batch, ObjectiveSettings("grpo"), _totals(batch)).loss.backward()
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[1, 0].item() == pytest.approx(-0.5)  # d/dlogp of -(exp(logp) * 1) / 2 at ratio 1


def test_kl_term_k3():
    # reference logp 0, policy logp -1: k3 = exp(1) - 1 - 1
    batch = TokenBatch(logprobs=torch.tensor([[-1.0]]), behaviour=torch.tensor([[-1.0]]),
                       advantages=torch.tensor([0.0]), mask=torch.ones(1, 1), reference=torch.tensor([[0.0]]))
    terms = objective_loss(batch, ObjectiveSettings("grpo", kl_coef=0.5), _totals(batch))
    assert terms.kl == pytest.approx(math.e - 2)
    assert terms.loss.item() == pytest.approx(0.5 * (math.e - 2))


def test_entropy_bonus():
    # on-policy, A = 1 on 2 tokens with entropies 0.4 and 0.8: -(1) - 0.1 * 0.6
    batch = _batch([[1.0, 1.0]], [1.0], entropies=torch.tensor([[0.4, 0.8]]))
    terms = objective_loss(batch, ObjectiveSettings("grpo", entropy_coef=0.1), _totals(batch))
    assert terms.loss.item() == pytest.approx(-1.0 - 0.1 * 0.6)
    assert terms.entropy_sum == pytest.approx(1.2)


def test_micro_batches_add_up_to_the_update():
    # the same update split in two micro-batches gives the same total for every objective
    whole = _batch()
    for name in ("grpo", "dr_grpo", "dapo", "gspo"):
        settings = ObjectiveSettings(name)
        total = objective_loss(whole, settings, _totals(whole)).loss.item()
        parts = [_batch(RATIOS[:2], ADVANTAGES[:2]), _batch(RATIOS[2:], ADVANTAGES[2:])]
        assert sum(objective_loss(p, settings, _totals(whole)).loss.item() for p in parts) == pytest.approx(total)


# --- every objective on the learner --------------------------------------------------------------
@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_model("echo2/tiny-arith"), load_tokenizer("echo2/tiny-arith")
    groups = sampled_groups(model, tokenizer, 4, 4, lambda g: [[1.0, 0.0, 0.0, 1.0], [1.0] * 4, [0.0, 0.0, 0.0, 1.0],
                                                              [0.0] * 4][g])
    return model, tokenizer, groups


@pytest.mark.parametrize("loss", ["grpo", "dr_grpo", "dapo", "gspo"])
@pytest.mark.parametrize("options", [
    [],
    ["learner.correction=decoupled", "learner.minibatches=2", "learner.epochs=2", "learner.echoclip.enabled=true",
     "learner.kl_coef=0.1", "learner.entropy_coef=0.01", "learner.micro_batch=3"],
], ids=["plain", "decoupled-2x2-updates-echoclip-kl-entropy"])
def test_every_objective_trains_a_learner_step(policy, loss, options):
    model, tokenizer, groups = policy
    config = load_config(overrides=[f"learner.loss={loss}", "learner.lr=1e-3", "learner.warm_start_optimizer=false",
                                    "rollout.group_size=4", *options])
    learner = Learner(copy.deepcopy(model), tokenizer, config.learner, config.rollout)
    record = learner.step(groups, version=0)
    assert math.isfinite(record["loss"]) and record["grad_norm"] > 0
    assert record["degenerate_all_correct_fraction"] == 0.25 and record["degenerate_all_wrong_fraction"] == 0.25
    assert 0 <= record["behaviour_weight_truncated_fraction"] <= 1 and record["behaviour_weight_max"] > 0
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), learner.model.parameters()))


def test_decoupled_proximal_policy_is_the_learners_at_the_start_of_the_step(policy):
    # one update per step: pi_prox is pi_theta at the update, so the clipped ratio is exactly 1;
    # with two updates the second one is measured against the policy before the first
    model, tokenizer, groups = policy
    for updates, exact in ((["learner.minibatches=1"], True), (["learner.epochs=2"], False)):
        config = load_config(overrides=["learner.correction=decoupled", "learner.lr=1e-2", "rollout.group_size=4",
                                        "learner.warm_start_optimizer=false", *updates])
        record = Learner(copy.deepcopy(model), tokenizer, config.learner, config.rollout).step(groups, version=0)
        assert (record["ratio_max"] == record["ratio_min"] == 1.0) is exact


def test_unset_fields_take_the_objectives_published_values():
    dapo = load_config(overrides=["learner.loss=dapo"]).learner
    assert (dapo.clip_low, dapo.clip_high, dapo.dynamic_sampling, dapo.std_normalize) == (0.2, 0.28, True, True)
    assert dapo.overlong_tokens(20480) == 4096 and dapo.overlong_tokens(14) == 3
    gspo = load_config(overrides=["learner.loss=gspo", "learner.clip_high=1e-3"]).learner
    assert (gspo.clip_low, gspo.clip_high) == (3e-4, 1e-3)  # set fields win
    assert load_config(overrides=["learner.loss=dr_grpo"]).learner.std_normalize is False
    grpo = load_config().learner
    assert (grpo.clip_low, grpo.clip_high, grpo.dynamic_sampling, grpo.overlong_tokens(14)) == (0.2, 0.2, False, 0)
    assert not grpo.echoclip.enabled and grpo.correction == "truncated"
