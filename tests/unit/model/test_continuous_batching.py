"""Continuous batching (:mod:`echo2.model.continuous`): a row samples what it samples alone, however
many rows share its steps and whenever it was admitted; ended rows leave before the next forward;
each token records the version that chose it; a trimmed cache changes nothing."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from echo2.model.continuous import ContinuousBatch, Row
from echo2.model.draws import Draws
from echo2.model.sampling import sample

PAD, EOS, SEED = 0, 1, 7
LOGPROB_TOLERANCE = 1e-5
"""fp32: padding columns add attention weights of exactly zero; batch shapes may change the rounding."""
PROMPTS = [[5, 6, 7], [5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16], [9, 10, 11, 12, 13, 14, 15, 16], [20], [20],
           [30, 31], [30, 31]]


def tiny(kind: str = "llama") -> torch.nn.Module:
    """A two-layer model whose EOS is likely, so that rows end at different steps."""
    torch.manual_seed(0)
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, pad_token_id=PAD, eos_token_id=EOS)
    model_class, config_class = (LlamaForCausalLM, LlamaConfig) if kind == "llama" else (Qwen2ForCausalLM, Qwen2Config)
    model = model_class(config_class(**shape)).eval()
    with torch.no_grad():
        model.lm_head.weight[EOS] = model.lm_head.weight[2:].mean(0) * 3
    return model


def rows(indices, budget: int = 30) -> list[Row]:
    return [Row(key=i, prompt_ids=PROMPTS[i], draw_key=(SEED, i), max_new_tokens=budget) for i in indices]


def alone(model, index: int, budget: int = 30):
    """What row ``index`` samples in a batch of its own (the static sampler)."""
    samples = sample(model, [PROMPTS[index]], max_new_tokens=budget, eos_id=EOS, pad_id=PAD,
                     draws=Draws([(SEED, index)]))
    return samples.completion_ids[0], samples.logprobs[0]


def assert_as_alone(model, finished: list[Row], budget: int = 30) -> None:
    assert sorted(row.key for row in finished) == list(range(len(PROMPTS)))
    for row in finished:
        tokens, logprobs = alone(model, row.key, budget)
        assert row.token_ids == tokens, row.key
        assert max(abs(a - b) for a, b in zip(row.logprobs, logprobs)) <= LOGPROB_TOLERANCE


def run(batch: ContinuousBatch, admissions: dict[int, list[Row]], version=lambda step: 0) -> tuple[list[Row], list]:
    """Step ``batch`` until it is empty and nothing is left to admit; ``admissions``: rows admitted
    before the step of that number. Returns the finished rows and the batch size at each step."""
    finished, sizes, step = [], [], 0
    while len(batch) or any(at >= step for at in admissions):
        batch.admit(admissions.get(step, []), version(step))
        sizes.append(len(batch))
        finished += batch.step(version(step))
        step += 1
    return finished, sizes


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_rows_admitted_together_sample_what_each_samples_alone(kind):
    model = tiny(kind)
    finished, sizes = run(ContinuousBatch(model, temperature=1.0, eos_id=EOS, pad_id=PAD), {0: rows(range(8))})
    assert_as_alone(model, finished)
    assert sizes[0] == 8 and sizes[-1] < 8  # rows left as they ended, before the next forward
    assert any(row.token_ids[-1] == EOS for row in finished) and any(len(row.token_ids) == 30 for row in finished)


def test_rows_admitted_mid_stream_sample_what_each_samples_alone_and_the_slots_are_refilled():
    model = tiny()
    batch = ContinuousBatch(model, temperature=0.7, eos_id=EOS, pad_id=PAD)
    finished, sizes = [], []
    waiting = rows(range(8))
    while waiting or len(batch):
        batch.admit([waiting.pop(0) for _ in range(min(3 - len(batch), len(waiting)))])  # at most 3 in flight
        sizes.append(len(batch))
        finished += batch.step(0)
    for row in finished:
        samples = sample(model, [PROMPTS[row.key]], max_new_tokens=30, eos_id=EOS, pad_id=PAD, temperature=0.7,
                         draws=Draws([(SEED, row.key)]))
        assert row.token_ids == samples.completion_ids[0]
        assert max(abs(a - b) for a, b in zip(row.logprobs, samples.logprobs[0])) <= LOGPROB_TOLERANCE
    assert sorted(row.key for row in finished) == list(range(8))
    assert max(sizes) == 3 and sizes.count(3) > len(sizes) // 2  # freed slots were filled at once


def test_each_token_records_the_version_whose_forward_gave_its_logits_and_a_version_change_keeps_the_cache():
    model = tiny()
    finished, _ = run(ContinuousBatch(model, temperature=1.0, eos_id=EOS, pad_id=PAD), {0: rows([2, 3]), 4: rows([0])},
                      version=lambda step: 0 if step < 6 else 1)
    by_key = {row.key: row for row in finished}
    # v1 from step 6 on: the token of step 6 still comes from step 5's forward, at v0
    assert by_key[2].versions[:7] == [0] * 7 and set(by_key[2].versions[7:]) == {1}
    assert by_key[0].versions[:3] == [0, 0, 0]  # admitted before step 4: prefill, steps 4 and 5 at v0
    assert all(len(row.versions) == len(row.token_ids) for row in finished)


def test_a_trimmed_cache_changes_nothing():
    """A long prompt's rows end first (a budget of 2), the short ones go on: the columns only the
    long rows used are trimmed, and the short rows still sample what they sample alone."""
    model = tiny()
    batch = ContinuousBatch(model, temperature=1.0, eos_id=EOS, pad_id=PAD)
    long_rows = [Row(key=i, prompt_ids=PROMPTS[i], draw_key=(SEED, i), max_new_tokens=1) for i in (2, 3)]
    batch.admit(long_rows + rows([4, 5]))
    width = batch._mask.shape[1]
    finished = batch.step(0)
    assert {row.key for row in finished} == {2, 3}
    assert batch._mask.shape[1] < width  # the long prompt's leading columns are gone
    while len(batch):
        finished += batch.step(0)
    for row in finished[2:]:
        tokens, logprobs = alone(model, row.key)
        assert row.token_ids == tokens
        assert max(abs(a - b) for a, b in zip(row.logprobs, logprobs)) <= LOGPROB_TOLERANCE


def test_bad_rows_are_refused():
    batch = ContinuousBatch(tiny(), temperature=1.0, eos_id=EOS, pad_id=PAD)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        batch.admit([Row(key="r", prompt_ids=[5], draw_key=(0, 0), max_new_tokens=0)])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        ContinuousBatch(tiny(), temperature=0.0, eos_id=EOS, pad_id=PAD)
    assert batch.step(0) == []
