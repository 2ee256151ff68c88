"""The shipped model, and the same loading path for any local HF model folder."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from echo2.learner.logprobs import completion_logprobs
from echo2.model.draws import Draws
from echo2.model.loading import SHIPPED_MODEL_DIR, load_model, load_tokenizer
from echo2.model.sampling import sample


def test_shipped_model_is_small_and_loads_with_plain_transformers():
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL_DIR)
    assert model.config.model_type == "qwen2"
    assert sum(p.numel() for p in model.parameters()) <= 5_000_000
    assert sum(f.stat().st_size for f in SHIPPED_MODEL_DIR.iterdir()) <= 20 * 1024 * 1024
    assert tokenizer.decode(tokenizer("12+34=")["input_ids"]) == "12+34="


def test_any_local_model_folder_goes_through_the_same_path(tmp_path):
    tokenizer = load_tokenizer("echo2/tiny-arith")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, loaded_tokenizer = load_model(str(tmp_path)), load_tokenizer(str(tmp_path))
    prompts = [loaded_tokenizer(p)["input_ids"] for p in ("1+2=", "30-4+5=")]
    samples = sample(model, prompts, max_new_tokens=5, eos_id=loaded_tokenizer.eos_token_id,
                     pad_id=loaded_tokenizer.pad_token_id, draws=Draws.seeded(0, len(prompts)))
    logprobs, mask = completion_logprobs(model, prompts, samples.completion_ids, pad_id=loaded_tokenizer.pad_token_id)
    for row, behaviour in enumerate(samples.logprobs):
        assert torch.allclose(logprobs[row, : len(behaviour)], torch.tensor(behaviour), atol=1e-4)
