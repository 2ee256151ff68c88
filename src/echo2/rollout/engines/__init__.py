"""Rollout engines: what a worker samples with and loads new weights into.

``hf`` (the portable default) runs the HF model in the worker process with echo2's own sampler;
``vllm`` runs vLLM on a GPU (``pip install 'echo2[vllm]'``). Both return a completion's tokens
with the log-prob of each sampled token under ``softmax(logits / T)`` and load a version's
verified payload in place, so the worker code around them is the same.
"""

from __future__ import annotations

from typing import Protocol

import torch

from echo2.protocol import RunSpec
from echo2.model.sampling import Samples


class Engine(Protocol):
    def generator(self, seed: int) -> torch.Generator:
        """A random generator seeded with ``seed``, on the device where this engine draws its samples."""

    def generate(self, prompt_ids: list[list[int]], generator: torch.Generator) -> Samples:
        """One completion per row of ``prompt_ids`` (a prompt repeated G times makes a group)."""

    def load(self, payload: bytes, sha256: str) -> None:
        """Apply a verified version payload (full weights or a LoRA adapter) in place."""

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """Groups of ``context_tokens``-long rows one generation batch can hold now (1 to ``most``)."""


def load_engine(spec: RunSpec, eos_id: int, pad_id: int, device: str = "cpu") -> Engine:
    """The engine ``spec.engine`` names, holding ``spec.model`` (with ``spec.adapter`` when set);
    ``device`` places the ``hf`` engine (vLLM always runs on the GPU)."""
    if spec.engine == "vllm":
        from echo2.rollout.engines.vllm import VllmEngine

        return VllmEngine(spec, eos_id, pad_id)
    from echo2.rollout.engines.hf import HfEngine

    return HfEngine(spec, eos_id, pad_id, device)
