"""Rollout engines: what a worker samples with and loads new weights into.

``hf`` (the portable default) runs the HF model in the worker process with echo2's own sampler;
``vllm`` runs vLLM on a GPU (``pip install 'echo2[vllm]'``); ``rollout.engine=module:Class`` names
one of your own. Each returns a completion's tokens with the log-prob of each sampled token under
``softmax(logits / T)``, each token drawn from the lease's draws by the verifiable rule
(:mod:`echo2.model.draws`: what the audits replay), and loads a version's verified payload in
place, so the worker code around them is the same: :class:`Engine` is every method and attribute
the worker uses, and one of them, :meth:`Engine.sample`, samples every kind of work.

* ``hf.py`` — the portable default; ``vllm.py`` — vLLM on a GPU; ``llamacpp.py`` — llama.cpp, what
  consumer devices run (GGUF models, quantized or not);
* ``bundles.py`` — a worker's sampler adapters (``echo2 serve``), merged one at a time;
* ``memory.py`` — a device's free memory and a decoding row's footprint.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from echo2.config.base import import_path
from echo2.model.draws import Draws
from echo2.model.sampling import RowFinished, Samples, WeightUpdates
from echo2.protocol import RunSpec

#: The engines echo2 ships (``rollout.engine``), each ``module:Class``.
BUILTIN_ENGINES = {"hf": "echo2.rollout.engines.hf:HfEngine", "vllm": "echo2.rollout.engines.vllm:VllmEngine",
                   "llamacpp": "echo2.rollout.engines.llamacpp:LlamaCppEngine"}


@dataclass(frozen=True)
class SamplingParams:
    """How a batch of rows is sampled: every row of one :meth:`Engine.sample` call alike."""

    max_new_tokens: int
    temperature: float
    """Each token drawn from ``softmax(logits / temperature)``, its log-prob under the same."""
    eos_id: int
    """The token that ends a row (-1: none; a request's own stop tokens are applied by the worker)."""

    @classmethod
    def of_run(cls, spec: RunSpec, eos_id: int) -> SamplingParams:
        """A task's rows: the run's token budget and temperature, ended by the model's end of sequence."""
        return cls(spec.max_new_tokens, spec.temperature, eos_id)


@runtime_checkable
class Engine(Protocol):
    """An engine is built as ``Class(spec, eos_id, pad_id, device)`` (:func:`load_engine`). Every
    kind of work is sampled through its one :meth:`sample` (a task's prompts, an agent's calls, a
    training service's requests): what differs is the sampler named and the parameters."""

    max_context: int | None
    """The model's window in tokens (None: unbounded): an episode whose next turn would not fit ends."""

    def sample(self, sampler: str, prompt_ids: list[list[int]], params: SamplingParams, draws: Draws,
               finished: RowFinished | None = None, updates: WeightUpdates | None = None) -> Samples:
        """One completion per row of ``prompt_ids`` (a prompt repeated G times makes a group), row
        ``i``'s tokens drawn from ``draws`` row ``i``; ``sampler``: ``""`` (:data:`~echo2.rollout.engines.bundles.BASE_SAMPLER`), the weights
        of the version held, or in a training service's fleet a sampler of the bundle held
        (:mod:`echo2.rollout.engines.bundles`). ``finished(row, token_ids, logprobs)`` is told each
        row the moment it is final (an engine that cannot tell earlier: all at the end), so the
        worker submits each group as soon as its rows are done. ``updates``: an engine that can
        apply a new version between two decoding steps does (in-flight updates) and returns each
        token's version in :attr:`~echo2.model.sampling.Samples.versions`; one that cannot ignores it."""

    def prompt_logprobs(self, sampler: str, prompt_ids: list[int], temperature: float) -> list[float]:
        """The log-prob of each prompt token after the first (asked only by a service's clients)."""

    def load(self, payload: bytes, sha256: str) -> None:
        """Apply a verified version payload (full weights, a LoRA adapter, or a bundle of samplers) in place."""

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """Groups of ``context_tokens``-long rows one generation batch can hold now (1 to ``most``)."""


#: What a task's run (which never asks for prompt log-probs) needs of an engine; a fleet that
#: serves requests needs every member of :class:`Engine`.
TASK_MEMBERS = ("max_context", "sample", "load", "groups_that_fit")


def load_engine(spec: RunSpec, eos_id: int, pad_id: int, device: str = "cpu") -> Engine:
    """The engine ``spec.engine`` names (a built-in or ``module:Class``), holding ``spec.model``
    (with ``spec.adapter`` when set); ``device`` places it (vLLM always runs on the GPU)."""
    what = f"rollout.engine={spec.engine!r}"
    engine_class = import_path(BUILTIN_ENGINES.get(spec.engine, spec.engine), what)
    if not isinstance(engine_class, type):
        raise TypeError(f"{what} is a {type(engine_class).__name__}, not an engine class (echo2.rollout.engines.Engine)")
    engine = engine_class(spec, eos_id, pad_id, device)
    needed = (*TASK_MEMBERS, "prompt_logprobs") if spec.serves_requests else TASK_MEMBERS
    if missing := [name for name in needed if not hasattr(engine, name)]:
        raise TypeError(f"{what} is not an engine{' that serves sampling requests' if spec.serves_requests else ''} "
                        f"(echo2.rollout.engines.Engine): it lacks {', '.join(missing)}")
    if missing := [name for name in ("finished", "updates") if name not in inspect.signature(engine.sample).parameters]:
        raise TypeError(f"{what}: its sample() takes no {'= or '.join(missing)}= (echo2.rollout.engines.Engine.sample: "
                        "finished is told each row as it ends, all at the end where the engine cannot tell earlier; "
                        "updates may be ignored by an engine that cannot apply weights between decoding steps)")
    return engine
