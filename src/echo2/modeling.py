"""Loading models and tokenizers: the shipped tiny model, any HF hub id, or a local path.

Both the learner and the workers go through here, so that they build the very same policy.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from echo2.lora import is_adapter_folder, load_adapter_folder

transformers_logging.disable_progress_bar()  # per-load progress bars would drown the run's own progress line

#: Name under which the model shipped inside the package is known in configs.
SHIPPED_MODEL = "echo2/tiny-arith"
SHIPPED_MODEL_DIR = Path(__file__).parent / "assets" / "tiny-arith"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name: str) -> str:
    """Map the shipped model's name to its folder; anything else is a hub id or local path."""
    if name == SHIPPED_MODEL:
        if not (SHIPPED_MODEL_DIR / "config.json").exists():
            raise FileNotFoundError(
                f"the shipped model is missing from {SHIPPED_MODEL_DIR}; "
                "rebuild it with `python scripts/train_tiny_model.py`"
            )
        return str(SHIPPED_MODEL_DIR)
    return name


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """Tokenizer with a pad token and left padding (prompts are right-aligned for generation)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ValueError(f"model {name!r}: its tokenizer defines no EOS token, so completions cannot end")
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(name: str, dtype: str = "float32") -> PreTrainedModel:
    """Causal LM in ``dtype``, in eval mode (callers switch to train mode where they train).

    A LoRA checkpoint (a peft adapter folder) comes back as its base model wrapped in the adapter.
    """
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r}: expected one of {sorted(DTYPES)}")
    if is_adapter_folder(resolve_model_path(name)):
        return load_adapter_folder(resolve_model_path(name), dtype)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=DTYPES[dtype])
    model.eval()
    return model


def resolve_device(setting: str, local_rank: int = 0) -> torch.device:
    """``cpu``, ``cuda`` (GPU ``local_rank``), ``cuda:N``, or ``auto`` (``cuda`` when a GPU is present)."""
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device("cuda", local_rank) if setting == "cuda" else torch.device(setting)


def pin_threads(threads: int) -> None:
    """Pin torch's intra-op threads so that a learner and workers sharing a few cores do not
    oversubscribe them (every process calls this first)."""
    torch.set_num_threads(max(1, threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
