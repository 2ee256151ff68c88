"""The GSM8K recipe (configs/gsm8k-qwen2.5-0.5b.yaml) offline: the very config file, with a tiny
randomly initialised Qwen2 and a byte-level BPE tokenizer with a ChatML chat template built here
(the shapes of Qwen2.5-Instruct's, nothing downloaded) and a small local GSM8K-style JSONL file."""

import json
from pathlib import Path

import pytest
from paths import DATA, REPO
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402

pytest.importorskip("math_verify")

GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
RECIPE = REPO / "configs" / "gsm8k-qwen2.5-0.5b.yaml"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_qwen2(folder: Path) -> Path:
    """A 2-layer random Qwen2 with a byte-level BPE tokenizer trained on the sample problems."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    texts = [value for line in GSM8K_SAMPLE.read_text().splitlines() for value in json.loads(line).values()]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(folder)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder


def test_the_recipe_trains_offline_on_a_tiny_random_qwen2(tmp_path):
    model = str(tiny_qwen2(tmp_path / "tiny-qwen2"))
    config = load_config(RECIPE, [
        f"model.name={model}", f"task.options.source={GSM8K_SAMPLE}", f"task.options.chat_template={model}",
        "learner.device=cpu", "workers.device=cpu", "workers.count=1", "run.steps=2", "eval.every=2", "eval.size=4",
        "rollout.max_new_tokens=12", "learner.groups_per_step=4", "rollout.groups_per_lease=2",
        "telemetry.tensorboard=false", "telemetry.progress=false", "coordinator.data_timeout_s=120",
        f"run.dir={tmp_path}", "run.name=run"])
    assert (config.model.dtype, config.task.name, config.learner.lr) == ("bfloat16", "gsm8k", 1e-6)
    summary = run_training(config)
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["version"] for r in records if "reward_mean" in r] == [1, 2]
    log = (summary.run_dir / "train.log").read_text()
    assert "<|im_start|>user" in log and "<|im_start|>assistant" in log  # prompts went through the chat template
    assert summary.reliability["groups_rejected"] == {} and summary.reliability["workers_quarantined"] == 0
    assert (summary.run_dir / "checkpoints" / "step_000002" / "model.safetensors").exists()
