"""The GSM8K recipe (configs/gsm8k-qwen2.5-0.5b.yaml) offline: the very config file, with a tiny
randomly initialised Qwen2 and a byte-level BPE tokenizer with a ChatML chat template built here
(the shapes of Qwen2.5-Instruct's, nothing downloaded) and a small local GSM8K-style JSONL file."""

import itertools
import json

import pytest
from paths import DATA, REPO

from echo2.config import load_config  # noqa: E402
from echo2.tasks import Example, load_task  # noqa: E402
from echo2.tasks.gsm8k import final_answer  # noqa: E402

pytest.importorskip("math_verify")

GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
RECIPE = REPO / "configs" / "gsm8k-qwen2.5-0.5b.yaml"


def test_gsm8k_answers_are_verified_by_math_verify():
    task = load_task("gsm8k", {"source": str(GSM8K_SAMPLE)})
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
    task = load_task("gsm8k", {"source": str(GSM8K_SAMPLE)})
    every = {task.prompt(json.loads(line)["question"]) for line in GSM8K_SAMPLE.read_text().splitlines() if line.strip()}
    held = {e.prompt for e in task.eval_examples(len(every))}
    drawn = {e.prompt for e in itertools.islice(task.train_examples(0), 50 * len(every))}
    assert held and len(drawn) >= 0.8 * len(every)  # both sides are real: 4 held out, 36 trained on
    assert not drawn & held, sorted(drawn & held)[:3]
    assert drawn | held == every  # every training problem is drawn, none dropped from both splits


def test_smollm2_recipe_parses_and_switches_to_full_fine_tuning_with_one_override():
    recipe = REPO / "configs" / "smollm2-135m-chain-sum.yaml"
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
