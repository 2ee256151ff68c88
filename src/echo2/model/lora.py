"""LoRA adapters (peft): train and broadcast a low-rank adapter instead of the full weights.

With ``learner.lora.enabled`` the learner wraps its policy in a peft LoRA adapter (LoRA, Hu et
al. 2021, arXiv 2106.09685): the base weights stay frozen, only the adapter's ``lora_A`` /
``lora_B`` matrices train, and each published version carries only those tensors
(``Manifest.kind == "lora"``). Every worker wraps its own copy of the same base model with the
same adapter shape (the :class:`~echo2.protocol.AdapterSpec` in the run spec) and copies each
version's adapter tensors into it.

The learner trains the adapter *unmerged* (peft's forward computes ``W x + (alpha / r) B A x``).
Sampling — on workers and in the learner's evaluation — uses a :class:`MergedCopy` instead: a
plain copy of the model whose adapted weights are ``W + (alpha / r) B A``, recomputed from the
frozen base after each version. An unmerged adapter adds two matmuls and a few element-wise
operations to each of the ~200 adapted layers of a 30-layer model, which doubles the cost of
decoding on a CPU (measured on SmolLM2-135M: 64 greedy completions in 19.9 s unmerged, 10.0 s
plain); merged, a version costs one small matmul per layer to load and sampling runs at the
plain model's speed. Both compute the same function up to one rounding of the merged weight to
the model's dtype (none in float32), well inside the verification's log-prob tolerance.

Checkpoints of a LoRA run are peft adapter folders (``adapter_config.json`` +
``adapter_model.safetensors`` naming their base model); :func:`echo2.model.loading.load_model`
loads such a folder on top of its base, so ``echo2 eval`` and ``--resume`` work unchanged.
"""

from __future__ import annotations

import copy
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
def quiet_peft() -> Iterator[None]:
    """peft still calls a transformers API that v5 deprecates (a FutureWarning on every wrap)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def import_peft():
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'echo2[lora]' (or pip install peft)") from None
    return peft


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG_FILE).is_file()


def add_adapter(model: torch.nn.Module, spec: AdapterSpec) -> PeftModel:
    """``model`` wrapped in a fresh LoRA adapter of shape ``spec`` (only the adapter trains)."""
    peft = import_peft()
    config = peft.LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                             target_modules=list(spec.target_modules), bias="none", task_type="CAUSAL_LM")
    with quiet_peft():
        wrapped = peft.get_peft_model(model, config)
    wrapped.train(model.training)
    return wrapped


def adapter_base(path: str | Path) -> str:
    """The base model an adapter checkpoint names."""
    return json.loads((Path(path) / ADAPTER_CONFIG_FILE).read_text())["base_model_name_or_path"]


def load_adapter_folder(path: str | Path, base: torch.nn.Module) -> PeftModel:
    """An adapter checkpoint on top of ``base`` (the model :func:`adapter_base` names), trainable
    (the learner resumes from it)."""
    with quiet_peft():
        model = import_peft().PeftModel.from_pretrained(base, str(path), is_trainable=True)
    model.eval()
    return model


def has_adapter(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


class MergedCopy:
    """A plain copy of a LoRA-wrapped ``model`` with its adapter merged into the weights.

    :meth:`refresh` recomputes ``W + (alpha / r) B A`` from the wrapped model's frozen base
    weights and current adapter (never from the previous merge, so no rounding accumulates).
    """

    def __init__(self, model: PeftModel) -> None:
        from peft.tuners.lora import LoraLayer

        with quiet_peft():
            merged = copy.deepcopy(model).merge_and_unload()
        # the weights keep requires_grad (peft froze the base ones): no optimizer holds them and
        # sampling runs under no_grad, but this CPU build of torch decoded with frozen bf16
        # weights twice as slowly (64 greedy SmolLM2 completions: 16.7 s frozen, 7.8 s not)
        self.model = merged.requires_grad_(True).eval()
        prefix = "base_model.model."
        self._layers = [(self.model.get_submodule(name.removeprefix(prefix)), layer)
                        for name, layer in model.named_modules() if isinstance(layer, LoraLayer)]

    @torch.no_grad()
    def refresh(self) -> torch.nn.Module:
        """The merged model, brought up to date with the wrapped model's adapter."""
        for merged, layer in self._layers:
            base = layer.get_base_layer().weight
            merged.weight.copy_(base.float() + layer.get_delta_weight("default").float())
        return self.model


def for_sampling(model: torch.nn.Module) -> torch.nn.Module:
    """A model to sample from once (``echo2 eval``): ``model`` itself, or a LoRA model merged."""
    return MergedCopy(model).refresh() if has_adapter(model) else model
