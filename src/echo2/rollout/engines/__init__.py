"""Rollout engines: what a worker samples with and loads new weights into.

``hf`` (the portable default) runs the HF model in the worker process with echo2's own sampler;
``vllm`` runs vLLM on a GPU (``pip install 'echo2[vllm]'``); ``rollout.engine=module:Class`` names
one of your own. Each returns a completion's tokens with the log-prob of each sampled token under
``softmax(logits / T)``, each token drawn from the lease's draws by the verifiable rule
(:mod:`echo2.model.draws`: what the audits replay), and loads a version's verified payload in
place, so the worker code around them is the same: :class:`Engine` is every method and attribute
the worker uses.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from echo2.config.base import import_path
from echo2.model.draws import Draws
from echo2.model.sampling import Samples
from echo2.protocol import RunSpec

#: The engines echo2 ships (``rollout.engine``), each ``module:Class``.
BUILTIN_ENGINES = {"hf": "echo2.rollout.engines.hf:HfEngine", "vllm": "echo2.rollout.engines.vllm:VllmEngine"}


@runtime_checkable
class Engine(Protocol):
    """An engine is built as ``Class(spec, eos_id, pad_id, device)`` (:func:`load_engine`)."""

    max_context: int | None
    """The model's window in tokens (None: unbounded): an episode whose next turn would not fit ends."""

    def generate(self, prompt_ids: list[list[int]], draws: Draws) -> Samples:
        """One completion per row of ``prompt_ids`` (a prompt repeated G times makes a group), row
        ``i``'s tokens drawn from ``draws`` row ``i``."""

    def load(self, payload: bytes, sha256: str) -> None:
        """Apply a verified version payload (full weights or a LoRA adapter) in place."""

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """Groups of ``context_tokens``-long rows one generation batch can hold now (1 to ``most``)."""


@runtime_checkable
class ServingEngine(Engine, Protocol):
    """An engine that serves sampling requests: a training service's fleet (``echo2 serve``), whose
    versions are bundles of sampler adapters (:mod:`echo2.rollout.engines.bundles`), each request
    naming one; an agent run's, whose requests name ``""``, the run's own weights."""

    def sample_with(self, sampler: str, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float,
                    eos_id: int, draws: Draws) -> Samples:
        """One completion per row by sampler ``sampler`` (``eos_id`` -1: no end-of-sequence stop)."""

    def prompt_logprobs(self, sampler: str, prompt_ids: list[int], temperature: float) -> list[float]:
        """The log-prob of each prompt token after the first."""


def load_engine(spec: RunSpec, eos_id: int, pad_id: int, device: str = "cpu") -> Engine:
    """The engine ``spec.engine`` names (a built-in or ``module:Class``), holding ``spec.model``
    (with ``spec.adapter`` when set); ``device`` places it (vLLM always runs on the GPU)."""
    what = f"rollout.engine={spec.engine!r}"
    engine_class = import_path(BUILTIN_ENGINES.get(spec.engine, spec.engine), what)
    if not isinstance(engine_class, type):
        raise TypeError(f"{what} is a {type(engine_class).__name__}, not an engine class (echo2.rollout.engines.Engine)")
    engine = engine_class(spec, eos_id, pad_id, device)
    needed = ServingEngine if spec.serves_requests else Engine
    if not isinstance(engine, needed):
        names = ("max_context", "generate", "load", "groups_that_fit",
                 *(("sample_with", "prompt_logprobs") if spec.serves_requests else ()))
        missing = [name for name in names if not hasattr(engine, name)]
        raise TypeError(f"{what} is not an engine {'that serves sampling requests ' if spec.serves_requests else ''}"
                        f"(echo2.rollout.engines.{needed.__name__}): it lacks {', '.join(missing)}")
    return engine
