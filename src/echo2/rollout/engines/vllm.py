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
  reset. A LoRA version is written as a peft adapter folder and served as a new ``LoRARequest``.

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

from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.model.draws import Draws, splitmix64
from echo2.model.loading import resolve_model_path
from echo2.model.sampling import Samples
from echo2.protocol import AdapterSpec, RunSpec

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


def adapter_folder(payload: bytes, spec: AdapterSpec, folder: Path) -> Path:
    """A peft adapter folder (what vLLM's LoRA loader reads) from an echo2 ``lora`` payload, whose
    tensors carry peft's in-memory names (``...lora_A.default.weight``)."""
    tensors = {name.replace(".default.", "."): tensor for name, tensor in load_tensors(payload).items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": spec.r, "lora_alpha": spec.alpha,
              "lora_dropout": spec.dropout, "target_modules": spec.target_modules, "bias": "none"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


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
        adapter = spec.adapter
        self.llm = self.vllm.LLM(
            model=resolve_model_path(spec.model), dtype=spec.dtype, seed=spec.seed,
            worker_extension_cls=f"{__name__}.WeightLoader", logprobs_mode="processed_logprobs",
            gpu_memory_utilization=GPU_MEMORY_UTILIZATION, enable_prefix_caching=True,
            enable_lora=adapter is not None, **({"max_lora_rank": adapter.r} if adapter else {}))
        self.workdir = Path(tempfile.mkdtemp(prefix="echo2-vllm-"))
        self.loaded = 0
        self.lora: Any = None
        self.max_context: int | None = None
        """Not checked between turns here (as before the Protocol named it): vLLM refuses a prompt
        past its own ``max_model_len``."""

    def generate(self, prompt_ids: list[list[int]], draws: Draws) -> Samples:
        """vLLM's own sampler, seeded per row from ``draws``' keys: reproducible, not the verifiable
        rule (the engine refuses to start in a run that audits draws, see ``__init__``)."""
        seeds = [splitmix64(seed ^ splitmix64(row)) % (2**31 - 1) for seed, row in draws.keys]
        params = [self.vllm.SamplingParams(temperature=self.spec.temperature, max_tokens=self.spec.max_new_tokens,
                                           logprobs=0, seed=seed, stop_token_ids=[self.eos_id]) for seed in seeds]
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(prompts, params, lora_request=self.lora, use_tqdm=False)
        return samples_from_outputs(outputs)

    def groups_that_fit(self, context_tokens: int, most: int) -> int:
        """``most``: vLLM schedules a batch within its own KV-cache budget (``GPU_MEMORY_UTILIZATION``)
        and queues what does not fit, so a larger lease never runs out of memory."""
        return most

    def load(self, payload: bytes, expected_sha256: str) -> None:
        if sha256(payload) != expected_sha256:
            raise CorruptPayload("weights payload does not match its sha256 (corrupt or truncated download)")
        self.loaded += 1
        if self.spec.adapter is not None:
            from vllm.lora.request import LoRARequest

            folder = adapter_folder(payload, self.spec.adapter, self.workdir / f"lora-{self.loaded}")
            self.lora = LoRARequest(f"echo2-{self.loaded}", self.loaded, str(folder))
            shutil.rmtree(self.workdir / f"lora-{self.loaded - 2}", ignore_errors=True)  # in use no more
            return
        path = self.workdir / "weights.safetensors"
        path.write_bytes(payload)
        self.llm.collective_rpc("echo2_load_weights", args=(str(path),))
        self.llm.reset_prefix_cache()
        path.unlink()
