"""The static-cache decoder (the CUDA-graph fast path, run eagerly on the CPU) samples what the
dynamic decoder samples: same tokens for the same seed, log-probs within float rounding, for a
plain model, an eager-attention model, a LoRA model's merged copy, and across reused shapes."""

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.integrations.sdpa_attention import repeat_kv

from echo2.model import decoding
from echo2.model.decoding import CACHE_BUCKET, StaticDecoder, grouped_decode_attention
from echo2.model.draws import Draws
from echo2.model.lora import MergedCopy, add_adapter
from echo2.model.sampling import Samples, sample
from echo2.protocol import AdapterSpec

PAD, EOS = 0, 1
LOGPROB_TOLERANCE = 1e-5
"""fp32: the static mask adds slots of exactly zero attention weight, which may change the rounding
of the attention sums and nothing else."""


def tiny(kind: str = "llama", attention: str = "sdpa") -> torch.nn.Module:
    torch.manual_seed(0)
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, pad_token_id=PAD, eos_token_id=EOS)
    model_class, config_class = (LlamaForCausalLM, LlamaConfig) if kind == "llama" else (Qwen2ForCausalLM, Qwen2Config)
    return model_class(config_class(**shape, attn_implementation=attention)).eval()


PROMPTS = [[5, 6, 7], [5, 6, 7], [9, 10, 11, 12, 13], [9, 10, 11, 12, 13], [20], [20]]


def draw(model: torch.nn.Module, decoder: StaticDecoder | None, seed: int = 0, new_tokens: int = 24,
         prompts: list[list[int]] = PROMPTS) -> Samples:
    return sample(model, prompts, max_new_tokens=new_tokens, eos_id=EOS, pad_id=PAD,
                  draws=Draws.seeded(seed, len(prompts)), decoder=decoder)


def assert_same(fast: Samples, reference: Samples) -> None:
    assert fast.completion_ids == reference.completion_ids
    for fast_row, reference_row in zip(fast.logprobs, reference.logprobs):
        assert len(fast_row) == len(reference_row)
        assert max((abs(a - b) for a, b in zip(fast_row, reference_row)), default=0.0) <= LOGPROB_TOLERANCE


@pytest.mark.parametrize("kind,attention", [("llama", "sdpa"), ("qwen2", "sdpa"), ("llama", "eager")])
def test_static_decoder_samples_what_the_dynamic_decoder_samples(kind, attention):
    model = tiny(kind, attention)
    reference = draw(model, None)
    assert reference.num_tokens > len(PROMPTS) * 4  # long enough to exercise many steps
    assert_same(draw(model, StaticDecoder(graphs=False)), reference)


def test_greedy_and_early_eos_agree():
    model = tiny()
    with torch.no_grad():  # make EOS likely so that rows finish at different steps
        model.lm_head.weight[EOS] *= 0
        model.lm_head.weight[EOS] += model.lm_head.weight[2:].mean(0) * 2
    reference = draw(model, None, new_tokens=40)
    assert any(row[-1] == EOS for row in reference.completion_ids)
    assert_same(draw(model, StaticDecoder(graphs=False), new_tokens=40), reference)
    greedy = [sample(model, PROMPTS, max_new_tokens=12, eos_id=EOS, pad_id=PAD, greedy=True, decoder=d)
              for d in (None, StaticDecoder(graphs=False))]
    assert_same(greedy[1], greedy[0])


def test_a_reused_shape_starts_clean():
    """The second call on the same (rows, length) buffers must not see the first call's cache."""
    model, decoder = tiny(), StaticDecoder(graphs=False)
    draw(model, decoder, seed=1)
    other = [[30, 31, 32], [30, 31, 32], [40, 41], [40, 41], [50, 51, 52, 53], [50, 51, 52, 53]]
    assert_same(draw(model, decoder, seed=2, prompts=other), draw(model, None, seed=2, prompts=other))
    assert len(decoder._shapes) == 1  # both calls fit one bucketed length


def test_lengths_are_bucketed_and_few_shapes_are_kept():
    model, decoder = tiny(), StaticDecoder(graphs=False)
    for new_tokens in (8, 8 + CACHE_BUCKET, 8 + 2 * CACHE_BUCKET):
        draw(model, decoder, new_tokens=new_tokens)
    lengths = sorted(length for _, _, length, _ in decoder._shapes)
    assert all(length % CACHE_BUCKET == 0 for length in lengths)
    assert len(lengths) == 2  # the oldest shape was dropped


def test_lora_merged_copy_decodes_alike_and_follows_new_adapter_weights():
    """A LoRA worker samples from a merged copy refreshed in place after each version: the static
    decoder (whose graphs hold the parameters' addresses) must follow the refreshed weights."""
    model = add_adapter(tiny(), AdapterSpec(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]))
    merged = MergedCopy(model)
    decoder = StaticDecoder(graphs=False)
    assert_same(draw(merged.refresh(), decoder), draw(merged.model, None))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    before = draw(merged.model, decoder)
    merged.refresh()
    after = draw(merged.model, decoder)
    assert after.logprobs != before.logprobs
    assert_same(after, draw(merged.model, None))


def test_grouped_decode_attention_is_attention_over_repeated_heads():
    """Query head h reads key/value head h // groups, as transformers' repeat_kv lays them out."""
    torch.manual_seed(0)
    rows, kv_heads, groups, length, dim = 3, 2, 3, 7, 8
    query = torch.randn(rows, kv_heads * groups, 1, dim)
    key, value = torch.randn(rows, kv_heads, length, dim), torch.randn(rows, kv_heads, length, dim)
    visible = torch.rand(rows, 1, 1, length) > 0.3
    visible[..., 0] = True
    reference = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=visible, scale=0.5).transpose(1, 2)
    grouped, _ = grouped_decode_attention(None, query, key, value, visible, scaling=0.5)
    assert grouped.shape == (rows, 1, kv_heads * groups, dim)
    torch.testing.assert_close(grouped, reference)
    with pytest.raises(ValueError, match="one new token"):
        grouped_decode_attention(None, query.expand(rows, kv_heads * groups, 2, dim), key, value, None)


def test_static_steps_attend_grouped_and_leave_the_model_as_it_was(monkeypatch):
    """Every static step runs the grouped attention (not the model's repeat-the-cache attention);
    the prefill and the model's later callers keep the model's own."""
    model, calls = tiny(), []
    monkeypatch.setitem(decoding.AttentionInterface._global_mapping, decoding.GROUPED_ATTENTION,
                        lambda *args, **kwargs: calls.append(args[1].shape) or grouped_decode_attention(*args, **kwargs))
    draw(model, StaticDecoder(graphs=False), new_tokens=5)
    layers = model.config.num_hidden_layers
    assert len(calls) == 5 * layers and all(shape[2] == 1 for shape in calls)
    assert model.config._attn_implementation == "sdpa"


def test_unsupported_attention_is_refused_with_a_clear_error():
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    with pytest.raises(ValueError, match="static decoding needs attention"):
        StaticDecoder().begin(flash, start=None, max_new_tokens=8, choice=None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_cuda_graph_replay_samples_what_the_dynamic_decoder_samples():
    """On a GPU the static decoder captures each shape once and replays it; reused across calls."""
    model = tiny().cuda()
    decoder = StaticDecoder(graphs=True)

    def on_gpu(decoder, seed):
        return sample(model, PROMPTS, max_new_tokens=24, eos_id=EOS, pad_id=PAD, decoder=decoder,
                      draws=Draws.seeded(seed, len(PROMPTS)))

    for seed in (0, 1):
        fast, reference = on_gpu(decoder, seed), on_gpu(None, seed)
        assert fast.completion_ids == reference.completion_ids
        assert max(abs(a - b) for f, r in zip(fast.logprobs, reference.logprobs) for a, b in zip(f, r)) < 1e-4
    assert decoder.graphs and all(buffers.graph is not None for buffers in decoder._shapes.values())
