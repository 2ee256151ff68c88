"""Audits of submitted groups at their own version, adaptive audit rates, the version cache,
quarantine, deregistration and the reliability report."""


import pytest
import torch
from verification_support import audit_policy, sampled_group

from echo2.exchange import Group
from echo2.learner.verification import Verifier
from echo2.learner.version_cache import VersionCache
from echo2.model.loading import SHIPPED_MODEL, load_model, load_tokenizer
from echo2.model.lora import MergedCopy, add_adapter
from echo2.protocol import AdapterSpec


def test_lora_audits_load_the_claimed_versions_adapter_into_a_merged_copy():
    pytest.importorskip("peft")
    tokenizer = load_tokenizer(SHIPPED_MODEL)
    policy = add_adapter(load_model(SHIPPED_MODEL), AdapterSpec(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    versions = VersionCache(keep=2, kind="lora")
    groups = []
    for version, seed in ((4, 1), (5, 2)):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, parameter in policy.named_parameters():
                if "lora_" in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
        versions.put(version, policy)
        groups.append(sampled_group(MergedCopy(policy).refresh(), tokenizer, version, f"honest-v{version}"))
    assert all("lora_" in name for name in versions.get(4))  # only the adapter is kept
    liar = Group(**{**groups[1].__dict__, "version": 4, "worker_id": "liar"})  # v5's rollouts, claimed as v4's
    verifier = Verifier(audit_policy(), policy, tokenizer, versions, seed=0)
    trained = [parameter.detach().clone() for parameter in policy.parameters()]
    assert set(verifier.check([*groups, liar]).suspects) == {"liar"}
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), trained))  # audits leave the policy alone
