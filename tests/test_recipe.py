"""The GSM8K recipe (configs/gsm8k-qwen2.5-0.5b.yaml) offline: the very config file, with a tiny
randomly initialised Qwen2 and a byte-level BPE tokenizer with a ChatML chat template built here
(the shapes of Qwen2.5-Instruct's, nothing downloaded) and a small local GSM8K-style JSONL file."""

import itertools
import json
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.tasks import Example, load_task  # noqa: E402
from echo2.tasks.gsm8k import final_answer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "gsm8k_sample.jsonl"
RECIPE = ROOT / "configs" / "gsm8k-qwen2.5-0.5b.yaml"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_qwen2(folder: Path) -> Path:
    """A 2-layer random Qwen2 with a byte-level BPE tokenizer trained on the sample problems."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    texts = [value for line in DATA.read_text().splitlines() for value in json.loads(line).values()]
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


def test_gsm8k_answers_are_verified_by_math_verify():
    task = load_task("gsm8k", {"source": str(DATA)})
    example = Example(prompt="", answer=final_answer("48 / 2 = 24 clips in May.\n#### 1,024"))
    assert example.answer == "1024"
    assert task.reward(example, "So the total is \\boxed{1024}.") == 1.0
    assert task.reward(example, "The answer is $1024.0$") == 1.0
    assert task.reward(example, "\\boxed{1025}") == 0.0 and task.reward(example, "no idea") == 0.0
    held = task.eval_examples(100)
    assert held and all(e.prompt.startswith("Question: ") for e in held)  # plain prompts without a template


def test_gsm8k_training_stream_never_yields_a_held_out_problem():
    """Catches a held-out split that leaks into training: thousands of draws from ONE training
    stream (every shuffled pass over the file's training problems, not just the first prompt)
    share no prompt with the held-out set, and between them cover every problem of the file."""
    task = load_task("gsm8k", {"source": str(DATA)})
    every = {task.prompt(json.loads(line)["question"]) for line in DATA.read_text().splitlines() if line.strip()}
    held = {e.prompt for e in task.eval_examples(len(every))}
    drawn = {e.prompt for e in itertools.islice(task.train_examples(0), 50 * len(every))}
    assert held and len(drawn) >= 0.8 * len(every)  # both sides are real: 4 held out, 36 trained on
    assert not drawn & held, sorted(drawn & held)[:3]
    assert drawn | held == every  # every training problem is drawn, none dropped from both splits


@pytest.mark.integration
def test_the_recipe_trains_offline_on_a_tiny_random_qwen2(tmp_path):
    model = str(tiny_qwen2(tmp_path / "tiny-qwen2"))
    config = load_config(RECIPE, [
        f"model.name={model}", f"task.options.source={DATA}", f"task.options.chat_template={model}",
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


def test_smollm2_recipe_parses_and_switches_to_full_fine_tuning_with_one_override():
    recipe = ROOT / "configs" / "smollm2-135m-chain-sum.yaml"
    config = load_config(recipe)
    assert config.model.name == "smollm2-135m-instruct" and config.model.dtype == "bfloat16"
    assert config.learner.master_dtype == "float32"
    assert config.learner.lora.enabled and config.learner.effective_lr == 2e-4
    assert config.eval.size >= 200 and config.run.max_minutes is not None and config.run.max_minutes < 30
    full = load_config(recipe, ["learner.lora.enabled=false"])
    assert not full.learner.lora.enabled and full.learner.effective_lr == 1e-5
    # the task as configured, minus the chat template (the real model is not needed here)
    task = load_task(config.task.name, {**config.task.options, "chat_template": None})
    held_out = task.eval_examples(config.eval.size)
    assert len({e.prompt for e in held_out}) == config.eval.size
    assert all(e.prompt.endswith(config.task.options["instruction"]) for e in held_out)


def test_gsm8k_recipe_computes_in_bf16_on_fp32_master_weights():
    config = load_config(RECIPE)
    assert config.model.dtype == "bfloat16" and config.learner.master_dtype == "float32"
