"""What every learner rank builds alike, and the whole life of the ranks that follow rank 0.

``echo2 train`` under torchrun (``torchrun --nproc-per-node N -m echo2.cli train ...``) runs
this code on every rank; rank 0 goes on to host the coordinator (:mod:`echo2.launch.train`),
the others only build the same learner and train on their share of each step
(:mod:`echo2.learner.distributed`). Alone, rank 0 is the whole learner.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from echo2.config import Config
from echo2.learner.checkpoint import restore_optimizer
from echo2.learner.distributed import Shard, follow, learner_device
from echo2.learner.precision import hold_master_weights
from echo2.learner.trainer import Learner
from echo2.model.loading import load_model, load_tokenizer, pin_threads, resolve_model_path
from echo2.model.lora import add_adapter, has_adapter
from echo2.protocol import AdapterSpec


def adapter_spec(config: Config) -> AdapterSpec | None:
    """The LoRA adapter a run trains (None: full weights)."""
    lora = config.learner.lora
    return AdapterSpec(r=lora.r, alpha=lora.alpha, dropout=lora.dropout,
                       target_modules=lora.target_modules) if lora.enabled else None


def load_policy(config: Config, weights: str) -> torch.nn.Module:
    """The policy from ``weights`` (model or checkpoint) on the learner's device, with the run's
    LoRA adapter when it trains one (a LoRA checkpoint carries its own); trainable parameters in
    ``learner.master_dtype``, frozen ones in ``model.dtype`` (:mod:`echo2.learner.precision`)."""
    adapter = adapter_spec(config)
    model = load_model(weights, config.model.dtype if adapter else config.learner.master_dtype)
    if adapter is not None and not has_adapter(model):
        model = add_adapter(model, adapter)
    return hold_master_weights(model, config.learner.master_dtype).to(learner_device(config.learner.device))


def build_learner(config: Config, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                  checkpoint: Path | None, shard: Shard) -> Learner:
    """The learner on ``model`` (rank 0's initial weights on every rank), its optimizer restored
    from ``checkpoint`` when resuming."""
    if shard.world > 1:
        with torch.no_grad():
            for parameter in model.parameters():  # e.g. a fresh LoRA adapter's random init
                dist.broadcast(parameter, src=0)
    learner = Learner(model, tokenizer, config.learner, config.rollout,
                      model_dir=str(checkpoint) if checkpoint else resolve_model_path(config.model.name), shard=shard,
                      compute_dtype=config.model.dtype)
    if checkpoint:
        restore_optimizer(checkpoint, learner)
    return learner


def run_follower(config: Config, shard: Shard) -> None:
    """A rank > 0: the checkpoint rank 0 resumes from (if any), the same learner, then follow."""
    pin_threads(config.learner.threads)
    torch.manual_seed(config.run.seed)
    checkpoint = shard.broadcast(None)
    weights = str(checkpoint) if checkpoint else config.model.name
    follow(build_learner(config, load_policy(config, weights), load_tokenizer(weights), checkpoint, shard), shard)
