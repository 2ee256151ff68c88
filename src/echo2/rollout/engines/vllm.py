"""vLLM rollout engine (``rollout.engine: vllm``; ``pip install 'echo2[vllm]'``, a CUDA GPU).

vLLM (Kwon et al., "PagedAttention", SOSP 2023, arXiv 2309.06180) generates far faster than a
plain decoding loop. What RL needs from it, and how:

* **Behaviour log-probs** of every sampled token under ``softmax(logits / T)``: ``logprobs=0``
  returns the sampled token's log-prob, and ``logprobs_mode="processed_logprobs"`` makes it the
  one after temperature scaling (vLLM's default is the raw logits' distribution).
* **In-place weight updates** without restarting the engine: each verified version's payload is
  written to a file and loaded by every vLLM worker through a worker extension
  (:class:`WeightLoader`, called with ``LLM.collective_rpc``) into ``model.load_weights`` — the
  pattern of vLLM's own RLHF examples — then the prefix cache, computed with the old weights, is
  reset. A LoRA version is written as a peft adapter folder and served as a new ``LoRARequest``;
  so is each sampler of a training service's bundle, a request naming its sampler (``echo2 serve``
  and an agent run's calls sample through the same :meth:`VllmEngine.sample`).

Everything vLLM-specific is imported lazily: without vLLM or without a GPU, building the engine
fails with one clear line; the helpers that shape payloads and outputs are plain Python.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save_file

from echo2.broadcast.bundle import PEFT_PREFIX, read_bundle
from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.model.draws import Draws, splitmix64
from echo2.model.loading import resolve_model_path
from echo2.model.sampling import RowFinished, Samples, WeightUpdates
from echo2.protocol import AdapterSpec, RunSpec
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.bundles import BASE_SAMPLER

#: Share of the GPU's memory vLLM may take (weights + KV cache).
GPU_MEMORY_UTILIZATION = 0.85


def require_vllm() -> Any:
    """The ``vllm`` module, or an error that says what is missing."""
    try:
        import vllm
    except ImportError:
        raise ImportError("rollout.engine=vllm needs vLLM: pip install 'echo2[vllm]' (Linux, CUDA GPU); "
                          "rollout.engine=hf runs anywhere") from None
    if not torch.cuda.is_available():
        raise RuntimeError("rollout.engine=vllm needs a CUDA GPU and none is visible; use rollout.engine=hf")
    return vllm


class WeightLoader:
    """vLLM worker extension (``worker_extension_cls``): load a safetensors file into the model."""

    def echo2_load_weights(self, path: str) -> int:
        tensors = load_tensors(Path(path).read_bytes())
        self.model_runner.model.load_weights(weights=tensors.items())  # type: ignore[attr-defined]
        return len(tensors)


def peft_folder(tensors: dict[str, torch.Tensor], rank: int, alpha: float, folder: Path, dropout: float = 0.0) -> Path:
    """A peft adapter folder (what vLLM's LoRA loader reads): ``tensors`` named by base-model
    module (``model.layers.0.self_attn.q_proj.lora_A.weight``), adapting the modules they name."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({PEFT_PREFIX + name: tensor.contiguous() for name, tensor in tensors.items()},
              str(folder / "adapter_model.safetensors"))
    targets = sorted({name.split(".lora_", 1)[0].rsplit(".", 1)[-1] for name in tensors})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha,
              "lora_dropout": dropout, "target_modules": targets, "bias": "none"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def adapter_folder(payload: bytes, spec: AdapterSpec, folder: Path) -> Path:
    """The run's own adapter as a peft folder, from an echo2 ``lora`` payload (whose tensors carry
    peft's in-memory names, ``base_model.model.<module>.lora_A.default.weight``)."""
    tensors = {name.replace(".default.", ".").removeprefix(PEFT_PREFIX): tensor
               for name, tensor in load_tensors(payload).items()}
    return peft_folder(tensors, spec.r, spec.alpha, folder, spec.dropout)


def bundle_folders(payload: bytes, folder: Path) -> dict[str, Path | None]:
    """A training service's bundle (:mod:`echo2.broadcast.bundle`) as one peft folder per sampler
    under ``folder``; the base model's own sampler (no tensors) as None: it needs no adapter."""
    folders: dict[str, Path | None] = {BASE_SAMPLER: None}
    for number, (name, sampler) in enumerate(sorted(read_bundle(payload).items())):
        if sampler.tensors:  # a sampler's name may hold any character but '/': its folder is numbered
            folders[name] = peft_folder(dict(sampler.tensors), sampler.rank, sampler.alpha, folder / str(number))
    return folders


def prompt_logprobs_of(output: Any, prompt_ids: list[int]) -> list[float]:
    """The log-prob of each prompt token after the first, from a vLLM ``RequestOutput`` asked for
    ``prompt_logprobs=0`` (its first entry is None: the first token has no context)."""
    steps = output.prompt_logprobs[1:]
    return [step[token].logprob for token, step in zip(prompt_ids[1:], steps, strict=True)]


def samples_from_outputs(outputs: Iterable[Any]) -> Samples:
    """echo2's :class:`Samples` from vLLM ``RequestOutput`` objects (one completion each)."""
    completions, logprobs = [], []
    for output in outputs:
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        completions.append(tokens)
        logprobs.append([step[token].logprob for token, step in zip(tokens, completion.logprobs)])
    return Samples(completion_ids=completions, logprobs=logprobs)


class VllmEngine:
    def __init__(self, spec: RunSpec, eos_id: int, pad_id: int, device: str = "cuda") -> None:
        """``device``: vLLM places itself on the GPU, whatever it says."""
        self.vllm = require_vllm()
        if spec.check_draws:
            raise RuntimeError("rollout.engine=vllm samples with vLLM's own sampler, not echo2's verifiable draws "
                               "(echo2.model.draws): run it with verification.check_draws=false, or use "
                               "rollout.engine=hf")
        self.spec, self.eos_id, self.pad_id = spec, eos_id, pad_id
        rank = spec.adapter.r if spec.adapter else spec.max_lora_rank if spec.sampler_bundles else None
        self.llm = self.vllm.LLM(
            model=resolve_model_path(spec.model), dtype=spec.dtype, seed=spec.seed,
            worker_extension_cls=f"{__name__}.WeightLoader", logprobs_mode="processed_logprobs",
            gpu_memory_utilization=GPU_MEMORY_UTILIZATION, enable_prefix_caching=True,
            enable_lora=rank is not None, **({"max_lora_rank": rank} if rank is not None else {}))
        self.workdir = Path(tempfile.mkdtemp(prefix="echo2-vllm-"))
        self.loaded = 0
        self.samplers: dict[str, Any] = {BASE_SAMPLER: None}
        """Sampler name -> the LoRA request that samples as it (None: the weights held, no adapter):
        the run's own adapter, or each sampler of a training service's bundle (:func:`bundle_folders`)."""
        self.max_context: int | None = None
        """Not checked between turns here (as before the Protocol named it): vLLM refuses a prompt
        past its own ``max_model_len``."""

    def sample(self, sampler: str, prompt_ids: list[list[int]], params: SamplingParams, draws: Draws,
               finished: RowFinished | None = None, updates: WeightUpdates | None = None) -> Samples:
        """vLLM's own sampler, seeded per row from ``draws``' keys: reproducible, not the verifiable
        rule (the engine refuses to start in a run that audits draws, see ``__init__``). vLLM's
        offline ``generate`` returns every row at once: ``finished`` is told them all at the end,
        and no version is applied mid-call (``updates`` unused: the worker swaps between calls)."""
        seeds = [splitmix64(seed ^ splitmix64(row)) % (2**31 - 1) for seed, row in draws.keys]
        stops = [params.eos_id] if params.eos_id >= 0 else []
        asked = [self.vllm.SamplingParams(temperature=params.temperature, max_tokens=params.max_new_tokens, logprobs=0,
                                          seed=seed, stop_token_ids=stops, ignore_eos=not stops) for seed in seeds]
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(prompts, asked, lora_request=self._lora(sampler), use_tqdm=False)
        samples = samples_from_outputs(outputs)
        if finished is not None:
            for row, (tokens, logprobs) in enumerate(zip(samples.completion_ids, samples.logprobs)):
                finished(row, tokens, logprobs, None)
        return samples

    def prompt_logprobs(self, sampler: str, prompt_ids: list[int], temperature: float) -> list[float]:
        """vLLM scores the prompt with the processed (temperature-scaled) distribution, as it samples."""
        asked = self.vllm.SamplingParams(temperature=temperature, max_tokens=1, prompt_logprobs=0)
        output, = self.llm.generate([{"prompt_token_ids": prompt_ids}], asked, lora_request=self._lora(sampler),
                                    use_tqdm=False)
        return prompt_logprobs_of(output, prompt_ids)

    def _lora(self, sampler: str) -> Any:
        """The LoRA request that samples as ``sampler`` (None: the weights held, no adapter)."""
        if sampler not in self.samplers:
            raise KeyError(f"sampler {sampler!r}: the version held carries {sorted(self.samplers)}")
        return self.samplers[sampler]

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """``most``: vLLM schedules a batch within its own KV-cache budget (``GPU_MEMORY_UTILIZATION``)
        and queues what does not fit, so a larger lease never runs out of memory."""
        return most

    def load(self, payload: bytes, expected_sha256: str) -> None:
        if sha256(payload) != expected_sha256:
            raise CorruptPayload("weights payload does not match its sha256 (corrupt or truncated download)")
        self.loaded += 1
        if self.spec.sampler_bundles or self.spec.adapter is not None:
            from vllm.lora.request import LoRARequest

            folder = self.workdir / f"version-{self.loaded}"
            folders = (bundle_folders(payload, folder) if self.spec.sampler_bundles else
                       {BASE_SAMPLER: adapter_folder(payload, self.spec.adapter, folder)})
            self.samplers = {name: None if path is None else
                             LoRARequest(f"echo2-{self.loaded}-{index}", self.loaded * 1_000_000 + index, str(path))
                             for index, (name, path) in enumerate(folders.items())}
            shutil.rmtree(self.workdir / f"version-{self.loaded - 2}", ignore_errors=True)  # in use no more
            return
        path = self.workdir / "weights.safetensors"
        path.write_bytes(payload)
        self.llm.collective_rpc("echo2_load_weights", args=(str(path),))
        self.llm.reset_prefix_cache()
        path.unlink()
