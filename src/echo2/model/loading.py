"""Loading models and tokenizers from any source :mod:`echo2.model.sources` resolves.

Both the learner and the workers go through here, so that they build the very same policy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from echo2.model.lora import adapter_base, is_adapter_folder, load_adapter_folder
from echo2.model.sources import SHIPPED_MODEL, SHIPPED_MODEL_DIR, resolve_model_path

transformers_logging.disable_progress_bar()  # per-load progress bars would drown the run's own progress line

__all__ = ["DTYPES", "SHIPPED_MODEL", "SHIPPED_MODEL_DIR", "load_model", "check_cpus", "load_tokenizer", "pin_cpus", "pin_threads", "pinned_cpus",
           "resolve_device", "resolve_model_path"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    if is_adapter_folder(path := resolve_model_path(name)):
        return load_adapter_folder(path, load_model(adapter_base(path), dtype))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
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


def check_cpus(cpus: Sequence[int] | None, what: str) -> None:
    """Raise unless this process may run on every CPU of ``cpus`` (None: nothing to check)."""
    available = os.sched_getaffinity(0)
    missing = sorted(set(cpus or ()) - available)
    if missing:
        raise ValueError(f"{what}: CPUs {missing} are not available here (this process may use {sorted(available)})")


def pin_cpus(cpus: Sequence[int] | None) -> None:
    """Restrict this process to ``cpus`` (Linux ``sched_setaffinity``; None: leave it as it is). On
    one machine this keeps local workers off the learner's cores, so that each side's speed does
    not depend on how busy the other is (``learner.cpus``, ``workers.cpus``)."""
    if cpus is not None:
        os.sched_setaffinity(0, set(cpus))


@contextmanager
def pinned_cpus(cpus: Sequence[int] | None) -> Iterator[list[int]]:
    """:func:`pin_cpus` for the duration of the block (a process may run several trainings); yields
    the CPUs the process had before."""
    before = os.sched_getaffinity(0)
    pin_cpus(cpus)
    try:
        yield sorted(before)
    finally:
        os.sched_setaffinity(0, before)
