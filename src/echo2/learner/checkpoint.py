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


#: Suffixes of the folders a save is written in (``.partial``) and an older save is set aside as
#: until the new one is in (``.replaced``): never a save's own name.
PARTIAL, REPLACED = ".partial", ".replaced"


@contextmanager
def atomic_folder(final: Path) -> Iterator[Path]:
    """A folder to write that appears at ``final`` whole or not at all: written as
    ``final.partial`` and renamed into place once the block ends without an error. An older
    ``final`` is renamed aside (``final.replaced``) first and deleted only once the new one is in,
    so a kill at any point leaves the old save or the new one (:func:`recover`), never neither.
    The learner's checkpoints and the training service's saves both use it."""
    partial, aside = final.with_name(final.name + PARTIAL), final.with_name(final.name + REPLACED)
    recover(final)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if final.exists():
        final.rename(aside)
    partial.rename(final)
    shutil.rmtree(aside, ignore_errors=True)


def recover(final: Path) -> None:
    """Put an older save set aside back at ``final`` when a kill came between setting it aside and
    renaming the new one in (``final`` missing, ``final.replaced`` there); drop one left aside
    after the new one was in."""
    aside = final.with_name(final.name + REPLACED)
    if aside.is_dir():
        if final.is_dir():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.rename(final)


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
    for aside in (run_dir / "checkpoints").glob(f"step_*{REPLACED}"):
        recover(aside.with_name(aside.name.removesuffix(REPLACED)))
    candidates = sorted(p for p in (run_dir / "checkpoints").glob("step_*")
                        if not p.name.endswith((PARTIAL, REPLACED)) and (p / RESUME_FILE).exists())
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
