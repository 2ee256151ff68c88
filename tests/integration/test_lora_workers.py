"""LoRA runs: only the adapter trains, only the adapter travels, workers apply it to their base."""

import json

import pytest

from echo2.broadcast.payload import serialize_parameters  # noqa: E402
from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.model.loading import load_model  # noqa: E402

pytest.importorskip("peft")


def test_lora_training_over_real_worker_processes(tmp_path):
    config = load_config(overrides=[
        "run.steps=3", "eval.size=20", "eval.every=3", "learner.groups_per_step=8", "rollout.groups_per_lease=4",
        "telemetry.tensorboard=false", "telemetry.progress=false", "coordinator.data_timeout_s=120",
        "learner.lora.enabled=true", f"run.dir={tmp_path}", "run.name=run"])
    summary = run_training(config)
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward_mean" in r]
    assert [r["version"] for r in steps] == [1, 2, 3]
    full_bytes = len(serialize_parameters(load_model("echo2/tiny-arith")))
    assert all(r["broadcast_bytes"] < 0.2 * full_bytes for r in steps)  # only the adapter travels
    assert any("dissemination_s" in r for r in records)  # and the workers loaded it
    assert (summary.run_dir / "checkpoints" / "step_000003" / "adapter_model.safetensors").exists()
    assert summary.reliability["groups_rejected"] == {}
