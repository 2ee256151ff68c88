"""AdamW for the learner, warm-started from the moments saved beside the initial weights.

Why: a fresh Adam's first updates are sign-like (every coordinate moves by about the learning
rate, however noisy its gradient), which throws a well-annealed small model out of its basin
before the second-moment estimates settle. When the model folder holds ``optimizer.pt`` (echo2
checkpoints do, and so does the shipped model), the first and second moments are copied from it
— only the moments: learning rate, betas and weight decay stay those of this run's config.
Only trainable parameters are optimised: with a LoRA adapter (:mod:`echo2.model.lora`) that is the
adapter alone, which starts from a fresh AdamW (the saved moments belong to the full weights).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from echo2.config import LearnerConfig
from echo2.learner.distributed import Shard, place_state

log = logging.getLogger("echo2")

#: File name of the optimizer state inside a model or checkpoint folder.
OPTIMIZER_FILE = "optimizer.pt"


def build_optimizer(model: torch.nn.Module, config: LearnerConfig, model_dir: str | None,
                    shard: Shard = Shard()) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (sharded under FSDP), moments warm-started when possible."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.effective_lr, betas=config.betas, weight_decay=config.weight_decay)
    path = Path(model_dir) / OPTIMIZER_FILE if model_dir else None
    full_weights = len(parameters) == len(list(model.parameters()))
    if not (config.warm_start_optimizer and full_weights and path is not None and path.exists()):
        return optimizer
    saved = torch.load(path, map_location="cpu", weights_only=True)["optimizer"]
    state = saved["state"]
    if len(state) != len(parameters) or any(
        state[i]["exp_avg"].shape != p.shape for i, p in enumerate(parameters) if i in state
    ):
        raise ValueError(f"{path}: optimizer state does not fit the model's parameters")
    optimizer.load_state_dict({"state": place_state(state, parameters, shard),
                               "param_groups": optimizer.state_dict()["param_groups"]})
    log.info("optimizer moments warm-started from %s", path)
    return optimizer
