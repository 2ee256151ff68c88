"""The run's sampling temperature reaches all three places that must agree on it: the worker's
sampler, the learner's re-scoring (the importance ratios) and the audit. Every other test samples
at 1.0, where forgetting the temperature anywhere changes nothing; the SmolLM2 recipe samples at
0.5. A worker sampling at 1.0 whatever the run says, a learner scoring at 1.0 or an audit at 1.0
would bias every importance ratio or quarantine every honest worker, silently."""

from types import SimpleNamespace

import pytest
import torch

from echo2.config import LearnerConfig, RolloutConfig
from echo2.exchange import Group
from echo2.learner.logprobs import completion_scores
from echo2.learner.trainer import Learner
from echo2.learner.verification import AuditPolicy, Verifier
from echo2.learner.version_cache import VersionCache
from echo2.model.draws import Draws
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.sources import SHIPPED_MODEL
from echo2.protocol import RunSpec
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.hf import HfEngine
from echo2.tasks import Example

TEMPERATURE = 0.5
EXAMPLE = Example("12+30-2=", "40")


@pytest.fixture(scope="module")
def shipped():
    return load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL)


@pytest.fixture(scope="module")
def worker_samples(shipped):
    """A group sampled by the worker's engine in a run at ``TEMPERATURE``."""
    _, tokenizer = shipped
    spec = RunSpec(model=SHIPPED_MODEL, dtype="float32", group_size=4,
                   temperature=TEMPERATURE, max_new_tokens=8, groups_per_lease=1, protocol="async", staleness=1,
                   fetch_delay_s=0.0, broadcast_stall_s=5.0, broadcast_timeout_s=30.0, heartbeat_interval_s=1.0,
                   seed=0)
    engine = HfEngine(spec, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    prompts = [tokenizer(EXAMPLE.prompt)["input_ids"]] * 4
    params = SamplingParams.of_run(spec, tokenizer.eos_token_id)
    return prompts, engine.sample("", prompts, params, Draws.seeded(3, len(prompts)))


def scores(model, tokenizer, prompts, completions, temperature):
    return completion_scores(model, prompts, completions, pad_id=tokenizer.pad_token_id,
                             temperature=temperature).logprobs


def rows_gap(reported: list[list[float]], scored: torch.Tensor) -> float:
    return max(abs(value - scored[i, j].item()) for i, row in enumerate(reported) for j, value in enumerate(row))


def test_the_worker_samples_and_reports_log_probs_at_the_runs_temperature(shipped, worker_samples):
    model, tokenizer = shipped
    prompts, samples = worker_samples
    at_run = scores(model, tokenizer, prompts, samples.completion_ids, TEMPERATURE)
    at_one = scores(model, tokenizer, prompts, samples.completion_ids, 1.0)
    assert rows_gap(samples.logprobs, at_run) < 1e-4
    assert rows_gap(samples.logprobs, at_one) > 0.05  # what a sampler at 1.0 would have reported


def test_the_learner_rescores_at_the_runs_temperature(shipped, worker_samples):
    model, tokenizer = shipped
    prompts, samples = worker_samples
    learner = Learner(model, tokenizer, LearnerConfig(), RolloutConfig(temperature=TEMPERATURE))
    rollouts = SimpleNamespace(prompts=prompts, completions=samples.completion_ids)
    rescored = learner._scores(model, rollouts, rows=list(range(len(prompts)))).logprobs
    assert rows_gap(samples.logprobs, rescored) < 1e-4  # importance ratios of exactly 1 on-policy


def test_the_audit_checks_at_the_runs_temperature(shipped, worker_samples):
    model, tokenizer = shipped
    prompts, samples = worker_samples
    group = Group(slot=0, example=EXAMPLE, version=3, worker_id="honest", token_ids=samples.completion_ids,
                  logprobs=samples.logprobs, rewards=[0.0] * len(prompts))
    versions = VersionCache(keep=1)
    versions.put(3, model)

    def audit(temperature: float) -> dict[str, str]:
        # a tolerance below the ~0.08 nats/token that 0.5 vs 1.0 makes on this confident model's
        # samples (an honest worker's gap is float noise, ~1e-6)
        policy = AuditPolicy(probation_groups=1000, decay=0.5, floor=0.05, logprob_tolerance=0.03,
                             temperature=temperature)
        return Verifier(policy, model, tokenizer, versions, seed=0).check([group]).suspects

    assert audit(TEMPERATURE) == {}  # an honest worker of a run at 0.5 passes
    assert set(audit(1.0)) == {"honest"}  # audited at the wrong temperature, it would be quarantined
