"""LoRA runs: only the adapter trains, only the adapter travels, workers apply it to their base."""


import pytest
import torch
from sampled_groups import sampled_groups  # noqa: E402

from echo2.broadcast.payload import CorruptPayload, load_parameters, serialize_parameters, sha256  # noqa: E402
from echo2.config import load_config  # noqa: E402
from echo2.launch.train import adapter_spec, run_spec  # noqa: E402
from echo2.learner.checkpoint import save_checkpoint  # noqa: E402
from echo2.learner.trainer import Learner  # noqa: E402
from echo2.model.loading import load_model, load_tokenizer  # noqa: E402
from echo2.model.lora import add_adapter  # noqa: E402
from echo2.rollout.engines import load_engine  # noqa: E402

pytest.importorskip("peft")

LORA = ["learner.lora.enabled=true", "learner.lora.r=4", "learner.lr=1e-2", "rollout.group_size=4"]


def _lora_learner(*overrides: str) -> Learner:
    torch.manual_seed(0)
    config = load_config(overrides=[*LORA, *overrides])
    tokenizer = load_tokenizer(config.model.name)
    model = add_adapter(load_model(config.model.name), adapter_spec(config))
    return Learner(model, tokenizer, config.learner, config.rollout)


def _trained_lora_learner() -> Learner:
    learner = _lora_learner()
    groups = sampled_groups(learner.model, learner.tokenizer, 4, 4, lambda g: [1.0, 0.0, 0.0, 1.0])
    learner.step(groups, version=0)
    return learner


def _logits(model, tokenizer) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokenizer("12+34-5=")["input_ids"]])).logits


def test_only_the_adapter_trains():
    learner = _lora_learner()
    base = {n: p.detach().clone() for n, p in learner.model.named_parameters() if "lora_" not in n}
    adapter = {n: p.detach().clone() for n, p in learner.model.named_parameters() if "lora_" in n}
    assert sum(p.numel() for p in adapter.values()) < 0.2 * sum(p.numel() for p in base.values())
    groups = sampled_groups(learner.model, learner.tokenizer, 4, 4, lambda g: [1.0, 0.0, 0.0, 1.0])
    learner.step(groups, version=0)
    now = dict(learner.model.named_parameters())
    assert all(torch.equal(now[n], p) for n, p in base.items())
    assert any(not torch.equal(now[n], p) for n, p in adapter.items())


def test_a_worker_applies_the_adapter_payload_to_its_own_base_model():
    learner = _trained_lora_learner()
    payload = serialize_parameters(learner.model, kind="lora")
    assert len(payload) < 0.2 * len(serialize_parameters(load_model("echo2/tiny-arith")))
    config = load_config(overrides=LORA)
    engine = load_engine(run_spec(config), learner.tokenizer.eos_token_id, learner.tokenizer.pad_token_id)
    assert not torch.allclose(_logits(engine.model, learner.tokenizer), _logits(learner.model, learner.tokenizer))
    engine.load(payload, sha256(payload))
    learner.model.eval()
    assert torch.allclose(_logits(engine.model, learner.tokenizer), _logits(learner.model, learner.tokenizer),
                          atol=1e-6)
    with pytest.raises(CorruptPayload, match="do not fit"):  # an adapter is no full-weights payload
        load_parameters(load_model("echo2/tiny-arith"), payload)


def test_a_lora_checkpoint_is_an_adapter_folder_that_loads_on_its_base(tmp_path):
    learner = _trained_lora_learner()
    folder = save_checkpoint(learner, tmp_path, version=1)
    assert (folder / "adapter_model.safetensors").exists() and not (folder / "model.safetensors").exists()
    reloaded = load_model(str(folder))
    learner.model.eval()
    assert torch.allclose(_logits(reloaded, learner.tokenizer), _logits(learner.model, learner.tokenizer), atol=1e-6)
    assert {n for n, p in reloaded.named_parameters() if p.requires_grad} == \
        {n for n, p in learner.model.named_parameters() if p.requires_grad}  # trainable: resumable
