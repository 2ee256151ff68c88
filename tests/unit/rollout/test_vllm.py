"""The vLLM engine: clear errors without vLLM or a GPU, the payload and output conversions it
relies on (plain Python, tested here), and — only where vLLM and a CUDA GPU exist — generation
with behaviour log-probs and in-place weight updates (skipped cleanly otherwise)."""

import importlib.util
import sys
from types import SimpleNamespace

import pytest
import torch

from echo2.broadcast.payload import serialize_parameters, sha256
from echo2.config import load_config
from echo2.launch.ranks import adapter_spec
from echo2.launch.train import run_spec
from echo2.model.draws import Draws
from echo2.rollout.engines import SamplingParams, load_engine
from echo2.rollout.engines import vllm as vllm_engine
from echo2.rollout.engines.vllm import adapter_folder, require_vllm, samples_from_outputs

GPU_VLLM = pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not torch.cuda.is_available(),
                              reason="needs vLLM and a CUDA GPU")


def test_a_missing_vllm_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed
    spec = run_spec(load_config(overrides=["rollout.engine=vllm"]))
    with pytest.raises(ImportError, match=r"pip install 'echo2\[vllm\]'"):
        load_engine(spec, eos_id=1, pad_id=0)


def test_vllm_without_a_gpu_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace())  # installed, but no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        require_vllm()


def test_vllm_outputs_become_samples_with_the_sampled_tokens_logprobs():
    def step(token, logprob):
        return {token: SimpleNamespace(logprob=logprob)}

    outputs = [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5, 1], logprobs=[step(5, -0.5), step(1, -0.1)])]),
               SimpleNamespace(outputs=[SimpleNamespace(token_ids=(7,), logprobs=[step(7, -2.0)])])]
    samples = samples_from_outputs(outputs)
    assert samples.completion_ids == [[5, 1], [7]] and samples.logprobs == [[-0.5, -0.1], [-2.0]]


def test_a_lora_payload_becomes_a_peft_adapter_folder(tmp_path):
    """What the vLLM engine hands vLLM's LoRA loader is a folder peft itself loads back exactly."""
    peft = pytest.importorskip("peft")
    from echo2.model.loading import load_model
    from echo2.model.lora import add_adapter

    spec = adapter_spec(load_config(overrides=["learner.lora.enabled=true", "learner.lora.r=4"]))
    model = add_adapter(load_model("echo2/tiny-arith"), spec)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()  # a trained adapter, not peft's zero initialisation
    folder = adapter_folder(serialize_parameters(model, kind="lora"), spec, tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(load_model("echo2/tiny-arith"), str(folder))
    ids = torch.tensor([[2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits, atol=1e-5)


def test_each_sampler_of_a_bundle_becomes_a_peft_folder_that_samples_as_the_workers_merge_does(tmp_path):
    """What the vLLM engine serves a training service's request with (a LoRA request per sampler) is
    the model the hf engine merges for it: the same logits, through peft's own loader."""
    peft = pytest.importorskip("peft")
    from echo2.broadcast.bundle import SamplerAdapter, bundle_payload
    from echo2.model.loading import load_model
    from echo2.rollout.engines.bundles import BASE_SAMPLER, SamplerWeights

    base = load_model("echo2/tiny-arith")
    generator = torch.Generator().manual_seed(0)
    samplers = {}
    for name, rank, modules in (("alice/run one", 2, ["q_proj", "v_proj"]), ("bob", 4, ["q_proj"])):
        tensors = {}
        for module in modules:
            layer = base.get_submodule(f"model.layers.0.self_attn.{module}")
            out_features, in_features = layer.weight.shape
            tensors[f"model.layers.0.self_attn.{module}.lora_A.weight"] = torch.randn(rank, in_features, generator=generator)
            tensors[f"model.layers.0.self_attn.{module}.lora_B.weight"] = torch.randn(out_features, rank,
                                                                                  generator=generator) * 0.1
        samplers[name.replace("/", "-")] = SamplerAdapter(rank=rank, alpha=8.0, tensors=tensors)
    samplers[BASE_SAMPLER] = SamplerAdapter(1, 1.0, {})
    folders = vllm_engine.bundle_folders(bundle_payload(samplers), tmp_path / "version-1")
    assert set(folders) == set(samplers) and folders[BASE_SAMPLER] is None  # the base model needs no adapter
    merged = SamplerWeights(load_model("echo2/tiny-arith"))
    merged.hold({name: sampler for name, sampler in samplers.items() if name != BASE_SAMPLER})
    ids = torch.tensor([[2, 3, 4, 5]])
    for name, folder in folders.items():
        if folder is None:
            continue
        served = peft.PeftModel.from_pretrained(load_model("echo2/tiny-arith"), str(folder)).eval()
        with torch.no_grad():
            expected = merged.use(name)(input_ids=ids).logits
            assert torch.allclose(served(input_ids=ids).logits, expected, atol=1e-4), name
            assert not torch.allclose(expected, base(input_ids=ids).logits, atol=1e-3)  # an adapter that matters


def test_vllm_prompt_logprobs_are_read_for_every_prompt_token_after_the_first():
    output = SimpleNamespace(prompt_logprobs=[None, {3: SimpleNamespace(logprob=-1.5), 9: SimpleNamespace(logprob=-0.2)},
                                              {4: SimpleNamespace(logprob=-0.7)}])
    assert vllm_engine.prompt_logprobs_of(output, [2, 3, 4]) == [-1.5, -0.7]


def test_vllm_refuses_to_start_in_a_run_that_audits_draws(monkeypatch):
    """vLLM samples with its own sampler, not the verifiable rule: in a run whose audits check draws,
    every honest vLLM worker would be quarantined, so it says so before it loads a model."""
    monkeypatch.setattr(vllm_engine, "require_vllm", lambda: object())  # as if vLLM and a GPU were here
    spec = run_spec(load_config(overrides=["rollout.engine=vllm"]))
    with pytest.raises(RuntimeError, match="verification.check_draws=false"):
        load_engine(spec, eos_id=1, pad_id=0)


@GPU_VLLM
def test_vllm_generates_with_behaviour_logprobs_and_loads_weights_in_place(tmp_path):
    from echo2.learner.logprobs import completion_logprobs
    from echo2.model.loading import load_model, load_tokenizer

    spec = run_spec(load_config(overrides=["rollout.engine=vllm", "rollout.max_new_tokens=8",
                                           "verification.check_draws=false"]))
    tokenizer = load_tokenizer(spec.model)
    engine = load_engine(spec, tokenizer.eos_token_id, tokenizer.pad_token_id)
    prompts = [tokenizer(p)["input_ids"] for p in ("12+34=", "5-7+80=")] * 4
    params = SamplingParams.of_run(spec, tokenizer.eos_token_id)
    samples = engine.sample("", prompts, params, Draws.seeded(0, len(prompts)))
    model = load_model(spec.model).cuda()
    logprobs, _ = completion_logprobs(model, prompts, samples.completion_ids, pad_id=tokenizer.pad_token_id)
    for row, behaviour in enumerate(samples.logprobs):
        assert torch.allclose(logprobs[row, : len(behaviour)].cpu(), torch.tensor(behaviour), atol=2e-2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(0.5)  # another version of the weights
    payload = serialize_parameters(model)
    engine.load(payload, sha256(payload))
    again = engine.sample("", prompts, params, Draws.seeded(0, len(prompts)))
    logprobs, _ = completion_logprobs(model, prompts, again.completion_ids, pad_id=tokenizer.pad_token_id)
    for row, behaviour in enumerate(again.logprobs):  # the engine now samples from the new weights
        assert torch.allclose(logprobs[row, : len(behaviour)].cpu(), torch.tensor(behaviour), atol=2e-2)
