"""The verifiable draw rule (:mod:`echo2.model.draws`): every token drawn from randomness the worker
did not choose, by a rule an auditor replays exactly.

The uniforms are SplitMix64 of the key, the same in every process; the inverse CDF is an exact
sampler of ``softmax(logits / T)``; the hf engine draws by it (the same draws, the same
completions; each sampled token inside its draw's interval); a token substituted afterwards
lies outside it.
"""

import os
import subprocess
import sys

import pytest
import torch

from echo2.core.draw_rule import request_draw, row_key, splitmix64, turn_uniforms, uniform
from echo2.model.draws import Draws, draw_gaps, inverse_cdf, token_intervals
from echo2.model.sources import SHIPPED_MODEL
from echo2.protocol import RunSpec
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.hf import HfEngine


def test_the_rule_is_splitmix64_and_the_same_in_every_process():
    assert splitmix64(0) == 0xE220A8397B1DCDAF  # SplitMix64's first output from state 0 (Steele et al. 2014)
    assert uniform(0, 0, 0) == 0.13870941014555427 and uniform(1, 2, 3) == 0.814259011529328  # pinned: the protocol
    code = "from echo2.core.draw_rule import uniform; print(repr(uniform(3, 7, 11)))"
    values = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": str(hash_seed)}).stdout.strip()
              for hash_seed in (1, 2, 3)}
    assert values == {repr(uniform(3, 7, 11))}
    assert len({uniform(3, row, position) for row in range(20) for position in range(20)}) == 400


def test_rows_of_a_lease_and_of_a_seeded_request_are_keyed_apart():
    assert row_key(5, 3) == (5 << 20) | 3 and row_key(5, 3) != row_key(3, 5)
    assert request_draw(None, 5, 2, draw_seed=99) == (99, row_key(5, 2))
    assert request_draw(7, 5, 2, draw_seed=99) == (7, 2)  # a client's own seed: the same in any lease
    # an episode's turns draw on from its model tokens before them, environment tokens skipped
    mask = [1, 1, 0, 0, 1, 1, 1]
    assert turn_uniforms(7, mask, [(9, 4, 0), (9, 4, 2)]) == [uniform(9, 4, 0), uniform(9, 4, 1), None, None,
                                                              uniform(9, 4, 2), uniform(9, 4, 3), uniform(9, 4, 4)]


def test_the_inverse_cdf_draws_exactly_from_the_distribution():
    probabilities = torch.tensor([0.5, 0.0, 0.2, 0.3])
    logp = probabilities.log()[None, :].expand(20_000, 4)
    u = torch.tensor([uniform(1, row, 0) for row in range(20_000)], dtype=torch.float64)
    counts = torch.bincount(inverse_cdf(logp, u), minlength=4).double() / 20_000
    assert counts[1] == 0 and torch.allclose(counts, probabilities.double(), atol=0.012)
    low, high = token_intervals(logp[:3], torch.tensor([0, 2, 3]))
    assert torch.allclose(low, torch.tensor([0.0, 0.5, 0.7], dtype=torch.float64))
    assert torch.allclose(high, torch.tensor([0.5, 0.7, 1.0], dtype=torch.float64))
    gaps = draw_gaps(low, high, torch.tensor([0.25, 0.6, 0.6], dtype=torch.float64))
    assert float(gaps[0]) == float(gaps[1]) == 0 and float(gaps[2]) == pytest.approx(0.1)  # 0.6 draws 2, not 3


@pytest.fixture(scope="module")
def engine():
    spec = RunSpec(model=SHIPPED_MODEL, dtype="float32", group_size=2, temperature=1.0, max_new_tokens=6,
                   groups_per_lease=1, protocol="async", staleness=1, fetch_delay_s=0.0, broadcast_stall_s=5.0,
                   broadcast_timeout_s=30.0, heartbeat_interval_s=1.0, seed=0)
    return HfEngine(spec, eos_id=1, pad_id=0)


def test_the_hf_engine_draws_by_the_rule_and_every_token_lies_in_its_interval(engine):
    from echo2.learner.logprobs import completion_scores

    prompts = [[2, 3, 4]] * 4
    draws = Draws([(5, row_key(0, i)) for i in range(4)])
    params = SamplingParams.of_run(engine.spec, 1)
    first, again = engine.sample("", prompts, params, draws), engine.sample("", prompts, params, draws)
    assert first.completion_ids == again.completion_ids and first.logprobs == again.logprobs
    other = engine.sample("", prompts, params, Draws([(6, row_key(0, i)) for i in range(4)]))
    assert other.completion_ids != first.completion_ids
    assert len({tuple(c) for c in first.completion_ids}) > 1  # the rows of a group draw apart
    scores = completion_scores(engine.sampling_model, prompts, first.completion_ids, pad_id=0, intervals=True)
    u = torch.tensor([[uniform(5, row_key(0, i), p) if p < len(c) else float("nan") for p in range(scores.mask.shape[1])]
                      for i, c in enumerate(first.completion_ids)], dtype=torch.float64)
    gaps = draw_gaps(*scores.intervals, u)
    assert float(torch.where(scores.mask > 0, gaps, 0.0).max()) < 1e-6  # honest: inside, to float precision
    substituted = [list(c) for c in first.completion_ids]
    substituted[0][0] = (substituted[0][0] + 1) % engine.model.config.vocab_size
    scores = completion_scores(engine.sampling_model, prompts, substituted, pad_id=0, intervals=True)
    assert float(draw_gaps(*scores.intervals, u)[0, 0]) > 0.01  # a chosen token lies outside its draw's interval


def test_the_audits_draw_tolerance_follows_the_workers_dtype_and_engine():
    from echo2.model.draws import QUANTIZED_ENGINE_DRAW_TOLERANCE, draw_tolerance

    assert draw_tolerance(None, "float32") == 0.01 and draw_tolerance(None, "bfloat16") == 0.2
    assert draw_tolerance(None, "float32", "llamacpp") == QUANTIZED_ENGINE_DRAW_TOLERANCE  # quantized kernels
    assert draw_tolerance(0.05, "float32", "llamacpp") == 0.05  # a configured one as it is
