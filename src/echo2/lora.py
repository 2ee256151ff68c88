"""LoRA adapters (peft): train and broadcast a low-rank adapter instead of the full weights.

With ``learner.lora.enabled`` the learner wraps its policy in a peft LoRA adapter (LoRA, Hu et
al. 2021, arXiv 2106.09685): the base weights stay frozen, only the adapter's ``lora_A`` /
``lora_B`` matrices train, and each published version carries only those tensors
(``Manifest.kind == "lora"``). Every worker wraps its own copy of the same base model with the
same adapter shape (the :class:`~echo2.protocol.AdapterSpec` in the run spec) and copies each
version's adapter tensors into it.

Workers apply the adapter *unmerged* (peft's forward computes ``W x + (alpha / r) B A x``)
rather than merging it into a copy of the base weights: loading a version is a copy of a few
small tensors, never a pass over the whole model, and the worker samples with exactly the
computation the learner scores with, so behaviour log-probs agree to float precision as they
do for full weights. The cost is the adapter's extra matmuls per forward (small at low rank).

Checkpoints of a LoRA run are peft adapter folders (``adapter_config.json`` +
``adapter_model.safetensors`` naming their base model); :func:`echo2.modeling.load_model`
loads such a folder on top of its base, so ``echo2 eval`` and ``--resume`` work unchanged.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from echo2.protocol import AdapterSpec

if TYPE_CHECKING:
    from peft import PeftModel

#: File that makes a folder a peft adapter rather than a full model.
ADAPTER_CONFIG_FILE = "adapter_config.json"


@contextmanager
def _quiet() -> Iterator[None]:
    """peft still calls a transformers API that v5 deprecates (a FutureWarning on every wrap)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'echo2[lora]' (or pip install peft)") from None
    return peft


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG_FILE).is_file()


def add_adapter(model: torch.nn.Module, spec: AdapterSpec) -> PeftModel:
    """``model`` wrapped in a fresh LoRA adapter of shape ``spec`` (only the adapter trains)."""
    peft = _peft()
    config = peft.LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                             target_modules=list(spec.target_modules), bias="none", task_type="CAUSAL_LM")
    with _quiet():
        wrapped = peft.get_peft_model(model, config)
    wrapped.train(model.training)
    return wrapped


def load_adapter_folder(path: str | Path, dtype: str) -> PeftModel:
    """An adapter checkpoint on top of the base model it names, trainable (the learner resumes from it)."""
    from echo2.modeling import load_model

    base = json.loads((Path(path) / ADAPTER_CONFIG_FILE).read_text())["base_model_name_or_path"]
    with _quiet():
        model = _peft().PeftModel.from_pretrained(load_model(base, dtype), str(path), is_trainable=True)
    model.eval()
    return model


def has_adapter(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")
