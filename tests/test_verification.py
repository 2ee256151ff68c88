"""Spot checks of submitted groups, quarantine, deregistration and the reliability report."""

import pytest
import torch
from conftest import make_state, submit_all

from echo2.coordinator.records import Rejected
from echo2.exchange import Group
from echo2.learner.verification import VerificationPolicy, Verifier
from echo2.modeling import SHIPPED_MODEL, load_model, load_tokenizer
from echo2.generation import sample
from echo2.tasks import ArithmeticTask, Example


@pytest.fixture(scope="module")
def shipped():
    return load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL)


def honest_group(model, tokenizer, task, example, version=3):
    ids = tokenizer(example.prompt)["input_ids"]
    samples = sample(model, [ids] * 4, max_new_tokens=8, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                     generator=torch.Generator().manual_seed(0))
    texts = tokenizer.batch_decode(samples.completion_ids, skip_special_tokens=True)
    return Group(slot=0, example=example, version=version, worker_id="w-honest", token_ids=samples.completion_ids,
                 logprobs=samples.logprobs, rewards=[task.reward(example, t) for t in texts])


def test_verifier_catches_false_rewards_and_foreign_logprobs(shipped):
    model, tokenizer = shipped
    task = ArithmeticTask()
    verifier = Verifier(VerificationPolicy(1.0, 1.0, 0.2, 1.0), model, tokenizer, task, seed=0)
    example = Example("12+30-2=", "40")
    honest = honest_group(model, tokenizer, task, example)
    liar = Group(**{**honest.__dict__, "worker_id": "w-liar", "rewards": [1.0] * 4})
    other_weights = Group(**{**honest.__dict__, "worker_id": "w-other",
                             "logprobs": [[v - 1.0 for v in row] for row in honest.logprobs]})
    suspects = verifier.check([honest, liar, other_weights], step=3)
    assert set(suspects) == {"w-liar", "w-other"}
    assert "the verifier gives" in suspects["w-liar"] and "nats/token" in suspects["w-other"]
    assert verifier.check([honest], step=4) == {}  # not the current version: only rewards are checked


def test_quarantine_discards_buffered_groups_requeues_prompts_and_refuses_the_worker():
    state = make_state(staleness=1, groups_per_step=2)
    liar, honest = state.register("liar"), state.register("honest")
    lease = state.lease(liar, worker_version=0, max_groups=2, wait_s=0)
    submit_all(state, liar, lease)
    pending = state.lease(liar, worker_version=0, max_groups=2, wait_s=0)
    assert state.quarantine(liar.worker_id, "lied") == 2
    with pytest.raises(Rejected) as refused:
        state.lease(liar, worker_version=0, max_groups=1, wait_s=0)
    assert refused.value.status == 403
    with pytest.raises(Rejected):
        submit_all(state, liar, pending)
    # every prompt it held (submitted or leased) goes to the honest worker instead
    again = state.lease(honest, worker_version=0, max_groups=8, wait_s=0)
    assert {p.prompt for p in lease.prompts + pending.prompts} <= {p.prompt for p in again.prompts}
    report = state.reliability()
    assert report["workers_quarantined"] == 1 and report["groups_discarded_quarantined"] == 2
    assert report["leases_expired"] == 1 and report["leases_completed"] == 1


def test_deregistering_worker_hands_its_leases_back():
    state = make_state(staleness=1, groups_per_step=2)
    leaving, staying = state.register("preempted"), state.register("staying")
    held = state.lease(leaving, worker_version=0, max_groups=4, wait_s=0)
    state.deregister(leaving)
    assert not leaving.alive and state.reliability()["workers_left"] == 1
    taken = state.lease(staying, worker_version=0, max_groups=4, wait_s=0)
    assert {p.prompt for p in held.prompts} == {p.prompt for p in taken.prompts}
