"""``rollout.engine=llamacpp``: llama.cpp, the engine of consumer devices, as a rollout engine.

ECHO-2's workers are cheap consumer devices; what such a device runs is llama.cpp (CPU, Apple
Metal, CUDA, Vulkan; quantized GGUF models: an 8B model in 5 GB). On a 2-core AVX2 CPU,
SmolLM2-135M's Q4_1 GGUF decodes 76 / 82 / 105 tokens/s at 1 / 8 / 32 rows on one thread, the hf
engine in float32 14 / 57 / 118 and in bf16 18 / 25 / 28. ``pip install 'echo2[llamacpp]'``.

What it keeps of echo2's contract (:class:`echo2.rollout.engines.Engine`):

* **The verifiable draw rule.** llama.cpp gives the logits; every token is chosen by echo2's own
  :class:`~echo2.model.decoding.Choice` (the inverse CDF of ``softmax(logits / T)`` at the row's
  uniform from the lease's draws), and its behaviour log-prob is computed from those logits at the
  run's temperature (llama.cpp's own log-probs ignore the temperature). The audit replays the same
  rule on the learner's model.
* **Continuous batching with per-sequence KV slots.** Each row is a llama.cpp sequence; a group's
  prompt is decoded once for all its rows (one batch entry carrying the G sequence ids); a row that
  ends frees its slot at once (``llama_memory_seq_rm``) and ``finished`` is told.
* **The learner's model.** A GGUF file is used as it is (quantized or not); the learner holds the
  same file dequantized (:mod:`echo2.model.sources`), so the quantized engine's log-probs differ
  from the learner's by the quantization, which the audit's tolerance must cover.

* **Versions.** A full-weights version is written as a float32 GGUF file with the base's metadata
  (:mod:`echo2.model.gguf_versions`) and the model reloaded from it: from then on the engine holds
  exactly the learner's numbers (the base's quantization is left behind with the first update). A
  LoRA version (a GGUF adapter on the quantized base) is not applied yet: such a run is refused at
  the start with the reason.
"""

from __future__ import annotations

import ctypes
import importlib
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_tensors

from echo2.broadcast.integrity import CorruptPayload
from echo2.broadcast.integrity import sha256 as payload_sha256
from echo2.model.decoding import Choice
from echo2.model.draws import Draws, uniform
from echo2.model.gguf_versions import write_version
from echo2.model.sampling import RowFinished, Samples, WeightUpdates
from echo2.model.sources import NAMED_SOURCES, ModelSourceError, named_source_file
from echo2.protocol import RunSpec
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.bundles import BASE_SAMPLER

MAX_ROWS = 64
"""Sequences decoded at once (llama.cpp's ``n_seq_max``): a lease's rows beyond wait for a free slot."""
CONTEXT_TOKENS = 8192
"""Tokens of the KV cache shared by every sequence (``kv_unified``): prompts plus completions in flight."""
BATCH_TOKENS = 2048
"""Tokens one ``llama_decode`` call takes (``n_batch``): prompts are decoded in batches of at most this."""


def require_llama_cpp() -> Any:
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as missing:
        raise ImportError("rollout.engine=llamacpp needs llama-cpp-python: pip install 'echo2[llamacpp]' "
                          "(built from source with cmake, ~10 minutes on 2 cores)") from missing


def gguf_file(model: str) -> Path:
    """The GGUF file ``model.name`` stands for: a ``.gguf`` path or a named source's file."""
    if model in NAMED_SOURCES:
        return named_source_file(model)
    if model.endswith(".gguf"):
        path = Path(model).expanduser()
        if not path.is_file():
            raise ModelSourceError(f"model {model!r}: no such GGUF file")
        return path.resolve()
    raise ModelSourceError(f"rollout.engine=llamacpp runs a GGUF model (a .gguf file or a named source such as "
                           f"{', '.join(NAMED_SOURCES)}), not {model!r}")


class LlamaCppEngine:
    def __init__(self, spec: RunSpec, eos_id: int, pad_id: int, device: str = "cpu") -> None:
        self.llama = require_llama_cpp()
        from llama_cpp import _internals

        if spec.adapter is not None or spec.sampler_bundles:
            raise NotImplementedError("rollout.engine=llamacpp cannot apply LoRA versions or sampler bundles yet: "
                                      "use rollout.engine=hf for this run")
        self.spec, self.eos_id, self.pad_id, self._internals = spec, eos_id, pad_id, _internals
        self.device, self.path = device, gguf_file(spec.model)
        self._versions = Path(tempfile.mkdtemp(prefix="echo2-llamacpp-"))
        """The GGUF file of the version held, once one was loaded (removed with the engine)."""
        weakref.finalize(self, shutil.rmtree, self._versions, True)
        self.model = self.context = None
        self._open(self.path)
        self.vocab = self.model.n_vocab()
        self.max_context: int | None = self.model.n_ctx_train()
        """The model's window: an episode whose next turn would not fit ends (:mod:`echo2.model.episodes`)."""

    def _open(self, path: Path) -> None:
        """Hold the model of the GGUF file ``path`` (the one held before is freed first)."""
        if self.context is not None:
            self.context.close()
            self.model.close()
        model_params = self.llama.llama_model_default_params()
        model_params.n_gpu_layers = 0 if self.device == "cpu" else -1
        self.model = self._internals.LlamaModel(path_model=str(path), params=model_params, verbose=False)
        context_params = self.llama.llama_context_default_params()
        context_params.n_ctx, context_params.n_batch, context_params.n_ubatch = CONTEXT_TOKENS, BATCH_TOKENS, 512
        context_params.n_seq_max, context_params.kv_unified = MAX_ROWS, True
        context_params.n_threads = context_params.n_threads_batch = torch.get_num_threads()
        self.context = self._internals.LlamaContext(model=self.model, params=context_params, verbose=False)

    def sample(self, sampler: str, prompt_ids: list[list[int]], params: SamplingParams, draws: Draws,
               finished: RowFinished | None = None, updates: WeightUpdates | None = None) -> Samples:
        """Rows decoded as llama.cpp sequences, up to :data:`MAX_ROWS` at once, a freed slot refilled
        from the rows waiting; no version is applied mid-call (``updates`` unused: see :meth:`load`)."""
        if sampler != BASE_SAMPLER:
            raise NotImplementedError("rollout.engine=llamacpp holds no sampler adapters (echo2 serve): use hf")
        choice = Choice(temperature=params.temperature, greedy=False, eos_id=params.eos_id, pad_id=self.pad_id)
        offsets = draws.offsets or [0] * len(prompt_ids)
        tokens: list[list[int]] = [[] for _ in prompt_ids]
        logprobs: list[list[float]] = [[] for _ in prompt_ids]
        waiting, running = list(range(len(prompt_ids))), {}  # running: row -> (sequence id, its next logits)
        free = list(range(MAX_ROWS))
        while waiting or running:
            admitted = []
            while waiting and free and self._room(prompt_ids, running, waiting[0], params):
                admitted.append((waiting.pop(0), free.pop(0)))
            running.update(self._prefill(prompt_ids, admitted))
            if not running:
                raise RuntimeError(f"a prompt of {len(prompt_ids[waiting[0]])} tokens does not fit llama.cpp's "
                                   f"{CONTEXT_TOKENS}-token cache with {params.max_new_tokens} new tokens")
            rows = list(running)
            logits = torch.from_numpy(np.stack([running[row][1] for row in rows]))
            uniforms = torch.tensor([uniform(*draws.keys[row], offsets[row] + len(tokens[row])) for row in rows],
                                    dtype=torch.float64)
            chosen, chosen_logprobs, ended = choice(logits, uniforms, torch.zeros(len(rows), dtype=torch.bool))
            going = []
            for row, token, logprob, end in zip(rows, chosen.tolist(), chosen_logprobs.tolist(), ended.tolist()):
                tokens[row].append(token)
                logprobs[row].append(logprob)
                if end or len(tokens[row]) >= params.max_new_tokens:
                    sequence = running.pop(row)[0]
                    self.context.kv_cache_seq_rm(sequence, -1, -1)
                    free.append(sequence)
                    if finished is not None:
                        finished(row, tokens[row], logprobs[row], None)
                else:
                    going.append(row)
            running.update(self._decode_next(prompt_ids, tokens, {row: running[row][0] for row in going}))
        return Samples(completion_ids=tokens, logprobs=logprobs)

    @staticmethod
    def _room(prompt_ids: list[list[int]], running: dict, row: int, params: SamplingParams) -> bool:
        """Whether row ``row`` fits the cache beside the running rows, each at its whole length."""
        held = sum(len(prompt_ids[r]) + params.max_new_tokens for r in running)
        return held + len(prompt_ids[row]) + params.max_new_tokens <= CONTEXT_TOKENS

    def _prefill(self, prompt_ids: list[list[int]], admitted: list[tuple[int, int]]) -> dict[int, tuple[int, np.ndarray]]:
        """Decode the admitted rows' prompts, each distinct prompt once for all the sequences that
        share it; each row's sequence id and the logits after its prompt."""
        shared: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for row, sequence in admitted:
            shared.setdefault(tuple(prompt_ids[row]), []).append((row, sequence))
        result = {}
        for prompt, members in shared.items():
            sequences = [sequence for _, sequence in members]
            for start in range(0, len(prompt), BATCH_TOKENS):  # a prompt longer than a batch: in pieces
                piece = prompt[start : start + BATCH_TOKENS]
                batch = self._internals.LlamaBatch(n_tokens=len(piece), embd=0, n_seq_max=len(members), verbose=False)
                try:
                    for index, token in enumerate(piece):
                        self._put(batch, index, token, start + index, sequences,
                                  logits=start + index == len(prompt) - 1)
                    batch.batch.n_tokens = len(piece)
                    self.context.decode(batch)
                    last = self._logits(len(piece) - 1)
                finally:
                    batch.close()
            result.update({row: (sequence, last) for row, sequence in members})
        return result

    def _decode_next(self, prompt_ids: list[list[int]], tokens: list[list[int]],
                     sequences: dict[int, int]) -> dict[int, tuple[int, np.ndarray]]:
        """Run each going row's newest token through the model (one batch entry per row, at its own
        position in its own sequence); each row's sequence id and its next logits."""
        if not sequences:
            return {}
        batch = self._internals.LlamaBatch(n_tokens=len(sequences), embd=0, n_seq_max=1, verbose=False)
        try:
            for index, (row, sequence) in enumerate(sequences.items()):
                position = len(prompt_ids[row]) + len(tokens[row]) - 1
                self._put(batch, index, tokens[row][-1], position, [sequence], logits=True)
            batch.batch.n_tokens = len(sequences)
            self.context.decode(batch)
            return {row: (sequence, self._logits(index)) for index, (row, sequence) in enumerate(sequences.items())}
        finally:
            batch.close()

    @staticmethod
    def _put(batch: Any, index: int, token: int, position: int, sequences: list[int], logits: bool) -> None:
        raw = batch.batch
        raw.token[index], raw.pos[index], raw.logits[index] = token, position, logits
        raw.n_seq_id[index] = len(sequences)
        for k, sequence in enumerate(sequences):
            raw.seq_id[index][k] = sequence

    def _logits(self, index: int) -> np.ndarray:
        """A copy of the logits of batch entry ``index`` (llama.cpp reuses its buffer)."""
        pointer = self.context.get_logits_ith(index)
        return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.vocab,)).copy()

    def prompt_logprobs(self, sampler: str, prompt_ids: list[int], temperature: float) -> list[float]:
        raise NotImplementedError("rollout.engine=llamacpp does not serve prompt log-probs yet: use hf")

    def load(self, payload: bytes, sha256: str) -> None:
        """A verified full-weights version: written as a GGUF file on the base's metadata and loaded
        in place of the model held (the file of the version before is removed)."""
        if payload_sha256(payload) != sha256:
            raise CorruptPayload("weights payload does not match its sha256 (corrupt or truncated download)")
        try:
            tensors = load_tensors(payload)
        except Exception as error:  # safetensors raises its own error types for malformed headers
            raise CorruptPayload(f"weights payload is not valid safetensors ({error})") from None
        try:
            written = write_version(self.path, tensors, self._versions / f"{sha256[:16]}.gguf")
        except ValueError as error:
            raise CorruptPayload(f"weights do not fit {self.path.name}: {error}") from None
        self._open(written)
        for old in self._versions.glob("*.gguf"):
            if old != written:
                old.unlink()

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """Groups whose rows the cache and the sequence slots hold at once (1 to ``most``)."""
        rows = min(MAX_ROWS, CONTEXT_TOKENS // max(1, context_tokens))
        return max(1, min(most, rows // self.spec.group_size))
