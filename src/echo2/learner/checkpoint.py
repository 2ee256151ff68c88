"""Checkpoints: an HF model folder (loadable with ``from_pretrained``), the optimizer and
scheduler state, and — for ``echo2 train --resume`` — everything else a crashed learner needs
to continue: the coordinator's books (data cursor, replay buffer, re-queued prompts; see
:mod:`echo2.coordinator.snapshot`), the loop's accounting and the RNG states.

Written to a temporary folder and renamed into place, so a crash never leaves half a checkpoint:
a folder named ``step_NNNNNN`` is complete by construction.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from echo2.learner.optimizer import OPTIMIZER_FILE
from echo2.learner.trainer import Learner

#: The resume state inside a checkpoint folder.
RESUME_FILE = "resume.pt"


@contextmanager
def atomic_folder(final: Path) -> Iterator[Path]:
    """A folder to write that appears at ``final`` whole or not at all: written as
    ``final.partial`` and renamed into place once the block ends without an error (replacing an
    older ``final``). The learner's checkpoints and the training service's saves both use it."""
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)


def save_checkpoint(learner: Learner, run_dir: Path, version: int, resume: dict[str, Any] | None = None) -> Path:
    final = run_dir / "checkpoints" / f"step_{version:06d}"
    with atomic_folder(final) as partial:
        optimizer = learner.optimizer_state()  # first: under FSDP every rank takes part in gathering it
        learner.policy.save_pretrained(partial)
        learner.tokenizer.save_pretrained(partial)
        torch.save({"optimizer": optimizer, "scheduler": learner.scheduler.state_dict()}, partial / OPTIMIZER_FILE)
        if resume is not None:
            torch.save(resume, partial / RESUME_FILE)
        (partial / "echo2_state.json").write_text(json.dumps({"version": version}))
    return final


def latest_resumable(run_dir: Path) -> Path:
    """The newest complete checkpoint of ``run_dir`` that holds a resume state."""
    candidates = sorted(p for p in (run_dir / "checkpoints").glob("step_*")
                        if not p.name.endswith(".partial") and (p / RESUME_FILE).exists())
    if not candidates:
        raise FileNotFoundError(f"{run_dir} has no resumable checkpoint (checkpoints/step_*/{RESUME_FILE})")
    return candidates[-1]


def restore_optimizer(checkpoint: Path, learner: Learner) -> None:
    """Restore the optimizer and the scheduler of ``learner`` (whose model came from ``checkpoint``)."""
    saved = torch.load(checkpoint / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    learner.load_optimizer_state(saved["optimizer"])
    learner.scheduler.load_state_dict(saved["scheduler"])


def load_resume_state(checkpoint: Path) -> dict[str, Any]:
    return torch.load(checkpoint / RESUME_FILE, map_location="cpu", weights_only=True)
