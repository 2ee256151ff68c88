"""Training clients: a LoRA adapter and its AdamW each, all on the service's one base model.

Each Tinker ``TrainingClient`` (``create_model``) gets its own peft adapter on the one frozen base
model (LoRA, Hu et al. 2021, arXiv 2106.09685), named after the client; its requests switch that
adapter in, so any number of clients train side by side on the memory of one base model plus
their adapters. ``forward_backward`` accumulates the gradients of the loss the request names
(:mod:`echo2.learner.objectives.tinker_losses`, echo2's own surrogate terms) into the adapter;
``optim_step`` applies them with the AdamW settings the request carries, through the same update
echo2's own learner steps with (:func:`echo2.learner.update.apply_update`). Saves are a peft
adapter folder (loadable by ``echo2 eval`` on top of the base model) with ``optimizer.pt``
beside it, written whole or not at all (:func:`echo2.learner.checkpoint.atomic_folder`).

Every method runs on the service's one work thread (:mod:`echo2.service.turns`).
"""

from __future__ import annotations

import copy
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tinker import types
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.learner.checkpoint import atomic_folder
from echo2.learner.logprobs import target_logprobs
from echo2.learner.objectives.tinker_losses import TINKER_LOSSES, LossSpec, tinker_loss
from echo2.learner.optimizer import OPTIMIZER_FILE
from echo2.learner.precision import ComputePrecision
from echo2.learner.update import AdamSettings, apply_update, set_adam
from echo2.model.lora import import_peft, quiet_peft
from echo2.service.turns import RequestError

log = logging.getLogger("echo2.service")

#: Bytes one adapter parameter costs the service: the float32 weight, its gradient and two AdamW
#: moments (16), its newest sampler's copies in the peft state, the fleet's bundle and the auditor
#: (~16), allocator slack. Set so that a rank-64 client of the tiny model comes to the 17.5 MB a
#: client was measured to add to the service's memory (6,738 x 64 x 40 = 17.2 MB).
BYTES_PER_ADAPTER_PARAMETER = 40
#: What a save holds beside the adapter folder: the client's LoRA shape and its steps.
CLIENT_FILE = "training_client.json"


def adaptable_layers(model: PreTrainedModel) -> dict[str, list[str]]:
    """The module names (suffixes) an adapter may wrap, by the ``LoraConfig`` flag that asks for
    them: the attention projections (``train_attn``), the MLP's (``train_mlp``) and the unembedding
    (``train_unembed``). Read from the model before any adapter wraps its layers (peft's wrappers
    hide each ``Linear`` one level down, beside the adapters' own)."""
    linear = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    output = model.get_output_embeddings()
    return {"train_attn": sorted({n.rsplit(".", 1)[-1] for n in linear if ".self_attn." in n}),
            "train_mlp": sorted({n.rsplit(".", 1)[-1] for n in linear if ".mlp." in n}),
            "train_unembed": [name for name, module in model.named_modules() if module is output]}


def lora_targets(layers: dict[str, list[str]], lora: types.LoraConfig, model: str) -> list[str]:
    """The module names a client's adapter wraps: the ``layers`` its ``lora`` flags ask for."""
    wanted = [flag for flag in layers if getattr(lora, flag)]
    if not wanted:
        raise RequestError("lora_config trains nothing: set at least one of train_attn, train_mlp, train_unembed")
    if missing := [flag for flag in wanted if not layers[flag]]:
        raise RequestError(f"{', '.join(missing)}: this model ({model}) has no such layers to adapt")
    return [name for flag in wanted for name in layers[flag]]


@dataclass
class TrainingClient:
    model_id: str
    adapter: str
    """The peft adapter's name on the base model."""
    lora: types.LoraConfig
    optimizer: torch.optim.AdamW
    steps: int = 0
    """Optimizer steps applied."""


class TrainingModels:
    """The training clients of one base model."""

    def __init__(self, base: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, lora_alpha: float,
                 max_rank: int, micro_batch: int, compute_dtype: str = "float32",
                 max_learning_rate: float = 1.0) -> None:
        self.base, self.tokenizer = base.requires_grad_(False), tokenizer
        self.max_learning_rate = max_learning_rate
        self.lora_alpha, self.max_rank, self.micro_batch = lora_alpha, max_rank, micro_batch
        self.precision = ComputePrecision(compute_dtype, next(base.parameters()).device.type)
        self.layers = adaptable_layers(base)
        self._adapter_width = sum(module.in_features + module.out_features for name, module in base.named_modules()
                                  if isinstance(module, torch.nn.Linear)
                                  and any(name.endswith(f".{n}") or name == n for ns in self.layers.values() for n in ns))
        """Rank-1 LoRA parameters of an adapter on every adaptable layer (A: in x r, B: r x out)."""
        self.wrapped = None
        """The peft model holding every client's adapter (None until the first client)."""
        self.clients: dict[str, TrainingClient] = {}
        self._names = 0

    # ------------------------------------------------------------------ clients
    def create(self, model_id: str, lora: types.LoraConfig | None) -> TrainingClient:
        """A new client with a fresh adapter (``lora.seed`` seeds its initialisation)."""
        if model_id in self.clients:
            return self.clients[model_id]
        if lora is None:
            raise RequestError("full-weight training clients are not served here: pass a lora_config (LoRA only)")
        if not 1 <= lora.rank <= self.max_rank:
            raise RequestError(f"lora rank {lora.rank} is outside 1..{self.max_rank} (service.max_lora_rank)")
        peft = import_peft()
        config = peft.LoraConfig(r=lora.rank, lora_alpha=self.lora_alpha, lora_dropout=0.0, bias="none",
                                 target_modules=lora_targets(self.layers, lora, type(self.base).__name__), task_type="CAUSAL_LM")
        name = self._new_name()
        with torch.random.fork_rng(devices=[]), quiet_peft():
            torch.manual_seed(lora.seed if lora.seed is not None else self._names)
            if self.wrapped is None:
                self.wrapped = peft.get_peft_model(self.base, config, adapter_name=name)
            else:
                self.wrapped.add_adapter(name, config)
        return self._register(model_id, name, lora)

    def client_bytes(self, rank: int | None = None) -> int:
        """The memory a training client of LoRA ``rank`` (None: ``max_rank``) is expected to hold:
        :data:`BYTES_PER_ADAPTER_PARAMETER` per parameter of an adapter on every adaptable layer."""
        return BYTES_PER_ADAPTER_PARAMETER * (rank or self.max_rank) * self._adapter_width

    def _new_name(self) -> str:
        self._names += 1
        return f"client{self._names}"

    def _register(self, model_id: str, name: str, lora: types.LoraConfig) -> TrainingClient:
        assert self.wrapped is not None
        self.wrapped.eval()  # no dropout: a client's forward passes are deterministic
        parameters = [p for n, p in self.wrapped.named_parameters() if f".{name}." in n]
        client = self.clients[model_id] = TrainingClient(model_id, name, lora, torch.optim.AdamW(parameters))
        log.info("training client %s: LoRA rank %d on %d parameters", model_id, lora.rank,
                 sum(p.numel() for p in parameters))
        return client

    def client(self, model_id: str) -> TrainingClient:
        if model_id not in self.clients:
            raise RequestError(f"no training client {model_id!r} (released, or never created)")
        return self.clients[model_id]

    def release(self, model_id: str) -> None:
        """Free a client's adapter and optimizer state."""
        client = self.clients.pop(model_id, None)
        if client is not None and self.wrapped is not None:
            self.wrapped.delete_adapter(client.adapter)

    def _switch_to(self, client: TrainingClient) -> torch.nn.Module:
        """The model with ``client``'s adapter active (and only its parameters trainable)."""
        assert self.wrapped is not None
        self.wrapped.set_adapter(client.adapter)
        return self.wrapped

    # ------------------------------------------------------------------ training
    def rows(self, data: list[types.Datum], spec: LossSpec) -> list[Row]:
        """The datums of a ``forward_backward`` checked for ``spec``, before it is queued."""
        needed = TINKER_LOSSES[spec.name]
        vocab = self.base.get_input_embeddings().num_embeddings
        return [datum_row(datum, index, needed, vocab) for index, datum in enumerate(data)]

    def forward_backward(self, model_id: str, rows: list[Row], spec: LossSpec, backward: bool = True) -> tuple[
            list[dict[str, np.ndarray]], dict[str, float]]:
        """Per datum the target tokens' log-probs and the loss per token, whose gradients
        accumulate into the adapter until ``optim_step`` (unless not ``backward``: ``forward_only``);
        the metrics (``loss:sum``)."""
        client = self.client(model_id)
        model = self._switch_to(client)
        needed = TINKER_LOSSES[spec.name]
        outputs: list[dict[str, np.ndarray]] = []
        loss_sum, tokens = 0.0, 0
        for start in range(0, len(rows), self.micro_batch):
            chunk = rows[start : start + self.micro_batch]
            with torch.set_grad_enabled(backward), self.precision():
                logprobs, mask = target_logprobs(model, [r.inputs for r in chunk], [r.targets for r in chunk],
                                                 pad_id=self.tokenizer.pad_token_id or 0)
                per_token = tinker_loss(spec, logprobs, _padded(chunk, needed, logprobs), mask)
                if backward:
                    per_token.sum().backward()
            loss_sum += float(per_token.detach().sum())
            tokens += int(mask.sum())
            outputs += [{"logprobs": logprobs[k, : len(row.targets)].detach().float().cpu().numpy(),
                         "elementwise_loss": per_token[k, : len(row.targets)].detach().float().cpu().numpy()}
                        for k, row in enumerate(chunk)]
        return outputs, {"loss:sum": loss_sum, "tokens:sum": float(tokens), "datums:sum": float(len(rows))}

    def optim_step(self, model_id: str, params: types.AdamParams) -> dict[str, float]:
        """Apply the accumulated gradients with ``params``' AdamW settings (echo2's update; checked
        at the door by :func:`adam_problem`). A step
        that would leave any adapter weight non-finite is not applied: the adapter and its moments
        are put back as they were (a NaN adapter, published for sampling, fails every worker that
        samples it), and the metrics say so (``update_refused:sum``)."""
        client = self.client(model_id)
        settings = AdamSettings(lr=params.learning_rate, betas=(params.beta1, params.beta2), eps=params.eps,
                                weight_decay=params.weight_decay, grad_clip=params.grad_clip_norm or None)
        set_adam(client.optimizer, settings)
        before = _snapshot(client.optimizer)
        try:
            norm = apply_update(client.optimizer, settings.grad_clip)
        except RuntimeError as error:  # torch refused a value midway (a float overflow): nothing of it kept
            _restore(client.optimizer, before)
            raise RequestError(f"this optimizer step failed and was not applied: {error}") from None
        if norm is None:  # (no grad_norm in the metrics: it is not finite, and JSON cannot carry NaN)
            log.warning("%s: a non-finite gradient; this optimizer step was not applied", model_id)
            return {"update_refused:sum": 1.0}
        if not _finite(client.optimizer):
            _restore(client.optimizer, before)
            log.warning("%s: this optimizer step would have made the adapter non-finite; not applied", model_id)
            return {"grad_norm:mean": norm, "update_refused:sum": 1.0}
        client.steps += 1
        return {"grad_norm:mean": norm, "learning_rate:mean": settings.lr}

    # ------------------------------------------------------------------ saves
    def save(self, model_id: str, folder: Path, optimizer: bool = True) -> None:
        """The client's adapter as a peft folder (and its AdamW state) at ``folder``, whole or not at all."""
        client = self.client(model_id)
        assert self.wrapped is not None
        with atomic_folder(folder) as partial:
            self.wrapped.save_pretrained(partial, selected_adapters=[client.adapter])
            for item in (partial / client.adapter).iterdir():  # peft nests a named adapter one folder down
                item.rename(partial / item.name)
            (partial / client.adapter).rmdir()
            if optimizer:
                torch.save({"optimizer": client.optimizer.state_dict()}, partial / OPTIMIZER_FILE)
            (partial / CLIENT_FILE).write_text(json.dumps({"lora": client.lora.model_dump(), "steps": client.steps,
                                                           "lora_alpha": self.lora_alpha}))

    @staticmethod
    def saved_alpha(folder: Path) -> float:
        """The LoRA alpha a save was made with."""
        return float(json.loads((folder / CLIENT_FILE).read_text())["lora_alpha"])

    @staticmethod
    def saved_lora(folder: Path) -> types.LoraConfig:
        """The LoRA shape a save was made with."""
        return types.LoraConfig.model_validate(json.loads((folder / CLIENT_FILE).read_text())["lora"])

    def load(self, model_id: str, folder: Path, optimizer: bool) -> TrainingClient:
        """``model_id`` with the adapter (and, with ``optimizer``, the AdamW state) saved at
        ``folder``; a client of that id already here is replaced by it, once the new adapter is in
        (peft keeps an active adapter: releasing the only one first left it pointing at nothing)."""
        saved = json.loads((folder / CLIENT_FILE).read_text())
        if optimizer and not (folder / OPTIMIZER_FILE).exists():
            raise RequestError(f"{folder.name} was saved without its optimizer state")
        replaced = self.clients.pop(model_id, None)
        name = self._new_name()
        with quiet_peft():
            if self.wrapped is None:
                self.wrapped = import_peft().PeftModel.from_pretrained(self.base, str(folder), adapter_name=name,
                                                                       is_trainable=True)
            else:
                self.wrapped.load_adapter(str(folder), adapter_name=name, is_trainable=True)
        if replaced is not None:
            self.wrapped.delete_adapter(replaced.adapter)
        client = self._register(model_id, name, self.saved_lora(folder))
        if optimizer:
            state = torch.load(folder / OPTIMIZER_FILE, map_location="cpu", weights_only=True)["optimizer"]
            client.optimizer.load_state_dict(state)
        client.steps = saved["steps"]
        return client


def adam_problem(params: types.AdamParams, max_learning_rate: float) -> None:
    """:class:`RequestError` naming the first of ``params`` no AdamW step can take safely: every
    value finite, ``0 <= learning_rate <= max_learning_rate`` (``service.max_learning_rate``),
    betas in [0, 1) (a beta of 1 or more never forgets, NaN poisons every moment), ``eps > 0``
    (0 divides a zero moment by zero), ``0 <= learning_rate * weight_decay <= 1``, ``grad_clip_norm`` >= 0."""
    bounds = (("learning_rate", params.learning_rate, 0.0 <= params.learning_rate <= max_learning_rate,
               f"in [0, {max_learning_rate:g}] (service.max_learning_rate)"),
              ("beta1", params.beta1, 0.0 <= params.beta1 < 1.0, "in [0, 1)"),
              ("beta2", params.beta2, 0.0 <= params.beta2 < 1.0, "in [0, 1)"),
              ("eps", params.eps, params.eps > 0.0, "> 0"),
              ("weight_decay", params.weight_decay,
               params.weight_decay >= 0.0 and params.learning_rate * params.weight_decay <= 1.0,
               ">= 0, with learning_rate * weight_decay <= 1 (AdamW scales each weight by 1 - lr * wd)"),
              ("grad_clip_norm", params.grad_clip_norm, params.grad_clip_norm >= 0.0, ">= 0 (0: not clipped)"))
    for name, value, within, expected in bounds:
        if not (math.isfinite(value) and within):
            raise RequestError(f"adam_params.{name}={value!r}: must be finite and {expected}")


def _snapshot(optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], dict]:
    """The optimizer's parameters and state, copied (a LoRA adapter's: small)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return [p.detach().clone() for p in params], copy.deepcopy(optimizer.state_dict())


def _finite(optimizer: torch.optim.Optimizer) -> bool:
    return all(bool(torch.isfinite(p).all()) for group in optimizer.param_groups for p in group["params"])


def _restore(optimizer: torch.optim.Optimizer, snapshot: tuple[list[torch.Tensor], dict]) -> None:
    values, state = snapshot
    with torch.no_grad():
        for param, value in zip((p for group in optimizer.param_groups for p in group["params"]), values, strict=True):
            param.copy_(value)
    optimizer.load_state_dict(state)


@dataclass
class Row:
    """One datum's tokens and the loss inputs it carries, one per position."""

    inputs: list[int]
    targets: list[int]
    loss_inputs: dict[str, np.ndarray]


def datum_row(datum: types.Datum, index: int, needed: tuple[str, ...], vocab: int) -> Row:
    """A datum's tokens and loss inputs, checked: token ids in the vocabulary, every input the loss
    needs, 1-D and one per position, finite."""
    inputs = datum.model_input.to_ints()
    if "target_tokens" not in datum.loss_fn_inputs:
        raise RequestError(f"datum {index}: loss_fn_inputs has no target_tokens")
    if not inputs:
        raise RequestError(f"datum {index}: model_input is empty")
    if not all(0 <= t < vocab for t in inputs):
        raise RequestError(f"datum {index}: model_input has token ids outside the vocabulary (0..{vocab - 1})")
    arrays = {name: datum.loss_fn_inputs[name].to_numpy() for name in ("target_tokens", *needed)
              if name in datum.loss_fn_inputs}
    if missing := [name for name in needed if name not in arrays]:
        raise RequestError(f"datum {index}: loss_fn_inputs lacks {missing} (the loss needs {list(needed)})")
    for name, array in arrays.items():
        if array.ndim != 1 or len(array) != len(inputs):
            raise RequestError(f"datum {index}: {name} has shape {list(array.shape)}, not [{len(inputs)}] "
                               f"(one per model_input token)")
        if name != "target_tokens" and not np.isfinite(array).all():
            raise RequestError(f"datum {index}: {name} is not finite everywhere")
    if not ((arrays["target_tokens"] >= 0) & (arrays["target_tokens"] < vocab)).all():
        raise RequestError(f"datum {index}: target_tokens has ids outside the vocabulary (0..{vocab - 1})")
    return Row(inputs, arrays["target_tokens"].astype(np.int64).tolist(),
                {name: arrays[name].astype(np.float32) for name in needed})


def _padded(rows: list[Row], names: tuple[str, ...], like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each loss input of ``rows`` right-padded with zeros to ``like``'s [N, T], on its device."""
    out = {}
    for name in names:
        tensor = torch.zeros(like.shape, dtype=torch.float32)
        for k, row in enumerate(rows):
            tensor[k, : len(row.targets)] = torch.from_numpy(row.loss_inputs[name])
        out[name] = tensor.to(like.device)
    return out
