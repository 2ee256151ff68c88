"""One untrusted number must never make training non-finite (security hole: one behaviour log-prob
of -1000 in an unaudited group turned every parameter NaN).

The defences, each tested alone: the protocol refuses a log-prob no sampler produces; ratios are
computed so they cannot overflow; a row whose behaviour log-probs are implausible under the policy
is left out of the step and its group reported for quarantine; an update whose gradient is not
finite is refused; a non-finite model is never published. A property test throws arbitrary
accepted log-probs at the learner step and asserts finite parameters.
"""

import copy
import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sampled_groups import sampled_groups

import echo2.learner.trainer as trainer_module
from echo2.config import load_config
from echo2.learner.objectives.surrogate import LOG_RATIO_LIMIT, importance_ratios
from echo2.learner.tally import IMPLAUSIBLE, NONFINITE
from echo2.learner.trainer import Learner, require_finite
from echo2.model.loading import load_model, load_tokenizer
from echo2.protocol import MIN_LOGPROB, Completion

REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_model("echo2/tiny-arith"), load_tokenizer("echo2/tiny-arith")
    return model, tokenizer, sampled_groups(model, tokenizer, 3, 4, lambda g: REWARDS[g])


def learner_for(model, tokenizer, *options: str) -> Learner:
    config = load_config(overrides=["learner.lr=1e-3", "learner.warm_start_optimizer=false", "rollout.group_size=4",
                                    *options])
    return Learner(copy.deepcopy(model), tokenizer, config.learner, config.rollout)


def poisoned(groups, group: int, value: float):
    """``groups`` with one token's behaviour log-prob of one completion of ``group`` set to ``value``."""
    out = [dataclasses.replace(g, logprobs=[list(row) for row in g.logprobs]) for g in groups]
    out[group].logprobs[1][0] = value
    return out


def finite(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_the_protocol_refuses_a_log_prob_no_sampler_produces():
    Completion(token_ids=[5, 6], logprobs=[-0.5, MIN_LOGPROB])  # the floor itself is accepted
    with pytest.raises(ValidationError, match="below -50: no sampler draws a token that unlikely"):
        Completion(token_ids=[5, 6], logprobs=[-0.5, -1000.0])


def test_ratios_cannot_overflow():
    logprobs, behaviour = torch.tensor([[-0.1, -0.2]]), torch.tensor([[-1000.0, -0.2]])
    ratios = importance_ratios(logprobs, behaviour, None, torch.ones(1, 2))
    assert torch.isfinite(ratios.policy).all() and torch.isfinite(ratios.behaviour).all()
    assert float(ratios.policy[0, 0]) == pytest.approx(torch.exp(torch.tensor(LOG_RATIO_LIMIT)).item(), rel=1e-5)


@pytest.mark.parametrize("options", [[], ["learner.correction=decoupled"], ["learner.loss=gspo"],
                                     ["learner.echoclip.enabled=true", "learner.minibatches=2"]],
                         ids=["grpo-truncated", "decoupled", "gspo", "echoclip-2-updates"])
def test_a_poisoned_log_prob_is_left_out_and_its_group_reported(policy, options):
    model, tokenizer, groups = policy
    learner = learner_for(model, tokenizer, *options)
    record = learner.step(poisoned(groups, group=1, value=-1000.0), version=0)
    assert finite(learner.model) and finite(learner.policy)
    assert learner.suspects == {1: IMPLAUSIBLE}
    assert record["implausible_rows"] == 1 and record["refused_updates"] == 0
    assert record["grad_norm"] > 0  # the honest groups still trained
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), learner.model.parameters()))


def test_an_honest_step_leaves_nothing_out(policy):
    model, tokenizer, groups = policy
    learner = learner_for(model, tokenizer)
    record = learner.step(groups, version=0)
    assert learner.suspects == {} and record["implausible_rows"] == 0 and record["refused_updates"] == 0


def test_an_update_with_a_non_finite_gradient_is_refused(policy, monkeypatch):
    model, tokenizer, groups = policy
    learner = learner_for(model, tokenizer)
    before = [p.detach().clone() for p in learner.model.parameters()]
    real_loss = trainer_module.objective_loss

    def nan_loss(*args, **kwargs):
        terms = real_loss(*args, **kwargs)
        return dataclasses.replace(terms, loss=terms.loss * float("nan"))

    monkeypatch.setattr(trainer_module, "objective_loss", nan_loss)
    record = learner.step(groups, version=0)
    assert all(torch.equal(p, q) for p, q in zip(before, learner.model.parameters()))  # not applied
    assert record["refused_updates"] == 1 and record["grad_norm"] == 0.0
    assert set(learner.suspects.values()) == {NONFINITE} and set(learner.suspects) == {0, 1, 2}


def test_a_non_finite_model_is_never_published(policy):
    model = copy.deepcopy(policy[0])
    require_finite(model, version=3)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="not finite after the step to version 3: not publishing it"):
        require_finite(model, version=3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.floats(min_value=MIN_LOGPROB, max_value=0.0), min_size=1, max_size=6),
       rows=st.lists(st.integers(min_value=0, max_value=11), min_size=1, max_size=6))
def test_any_accepted_log_probs_keep_the_parameters_finite(policy, values, rows):
    model, tokenizer, groups = policy
    attacked = [dataclasses.replace(g, logprobs=[list(row) for row in g.logprobs]) for g in groups]
    for value, row in zip(values, rows):
        attacked[row // 4].logprobs[row % 4][0] = value
    learner = learner_for(model, tokenizer, "learner.lr=1e-1")
    learner.step(attacked, version=0)
    assert finite(learner.model)


def left_out_by_the_step(groups, suspects: dict[int, str]) -> list:
    """What the loop gives back after a step that left ``suspects`` out, audited against v0's weights."""
    from types import SimpleNamespace

    from echo2.learner.loop import LearnerLoop
    from echo2.learner.verification import AuditPolicy, Verifier
    from echo2.learner.version_cache import VersionCache

    model = load_model("echo2/tiny-arith")
    versions = VersionCache(keep=2)
    versions.put(0, model)
    verifier = Verifier(AuditPolicy(probation_groups=0, decay=1.0, floor=0.0, logprob_tolerance=0.2, temperature=1.0),
                        model, load_tokenizer("echo2/tiny-arith"), versions, seed=0)
    calls = []
    loop = SimpleNamespace(learner=SimpleNamespace(suspects=suspects), verifier=verifier,
                           state=SimpleNamespace(give_back=lambda taken, reason, why, worker_id=None: calls.append((taken, reason, why))))
    LearnerLoop._quarantine_suspects(loop, groups)
    return calls


def test_the_loop_quarantines_a_left_out_group_whose_audit_fails(policy):
    groups = [dataclasses.replace(g, worker_id=f"w{i}") for i, g in enumerate(poisoned(policy[2], 2, -40.0))]
    [(taken, reason, why)] = left_out_by_the_step(groups, {2: IMPLAUSIBLE})
    assert taken == [groups[2]] and reason == "suspect"  # its worker quarantined, its prompt back in the queue
    assert why.startswith(IMPLAUSIBLE) and "from v0's, the version the group claims" in why


@pytest.mark.parametrize("why", [IMPLAUSIBLE, NONFINITE])
def test_an_honest_group_the_step_left_out_keeps_its_worker(policy, why):
    """Far from the learner's current policy is no proof of a lie: a policy that moved a lot since
    (no correction at S = 8, several updates a batch) strays from honest samples too. The group's
    audit at the version it claims passes, so nobody is quarantined."""
    groups = [dataclasses.replace(g, worker_id=f"w{i}") for i, g in enumerate(policy[2])]
    assert left_out_by_the_step(groups, {1: why, 2: why}) == []
