"""Checkpoints: an HF model folder (loadable with ``from_pretrained``) plus the optimizer state.

Written to a temporary folder and renamed into place, so a crash never leaves half a checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from echo2.learner.optimizer import OPTIMIZER_FILE
from echo2.learner.trainer import Learner


def save_checkpoint(learner: Learner, run_dir: Path, version: int) -> Path:
    final = run_dir / "checkpoints" / f"step_{version:06d}"
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    learner.model.save_pretrained(partial)
    learner.tokenizer.save_pretrained(partial)
    torch.save({"optimizer": learner.optimizer.state_dict(), "scheduler": learner.scheduler.state_dict()},
               partial / OPTIMIZER_FILE)
    (partial / "echo2_state.json").write_text(json.dumps({"version": version}))
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return final
