"""A sampled group and an audit policy for the learner-side verification tests."""

from __future__ import annotations

from echo2.core.draw_rule import row_key
from echo2.exchange import Group
from echo2.learner.verification import AuditPolicy
from echo2.model.draws import Draws
from echo2.model.sampling import sample
from echo2.tasks import Example

EXAMPLE = Example("12+30-2=", "40")


def sampled_group(model, tokenizer, version, worker_id, seed=0, example=EXAMPLE):
    """A group sampled from ``model`` with the draws of lease ``seed`` (slot 0), with its behaviour
    log-probs and its draw keys (as the coordinator records them), claiming ``version``."""
    ids = tokenizer(example.prompt)["input_ids"]
    keys = [(seed, row_key(0, i)) for i in range(4)]
    samples = sample(model, [ids] * 4, max_new_tokens=8, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                     draws=Draws(keys))
    return Group(slot=0, example=example, version=version, worker_id=worker_id, token_ids=samples.completion_ids,
                 logprobs=samples.logprobs, rewards=[0.0] * 4, turn_draws=[[(*key, 0)] for key in keys])


def audit_policy(probation_groups=1000, decay=0.5, floor=0.05):
    return AuditPolicy(probation_groups=probation_groups, decay=decay, floor=floor, logprob_tolerance=0.2,
                       temperature=1.0)

