"""Leases sized to the device (``rollout.groups_per_lease: device``): a worker asks for as many
groups as its free memory holds the decoding of, up to the staleness window."""

import json

from echo2.config import load_config


def test_a_shipped_model_row_costs_its_kv_cache_and_the_host_has_room_for_a_window(tmp_path):
    from echo2.model.loading import load_model
    from echo2.rollout.engines.memory import decode_footprint, free_memory_bytes

    model = load_model("echo2/tiny-arith")
    config = model.config
    footprint = decode_footprint(model)
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    assert footprint.kv_bytes_per_token == 2 * config.num_hidden_layers * kv_heads * head_dim * 4  # float32
    assert free_memory_bytes(model.device) > 10 * footprint.row_bytes(64)


def test_a_run_with_device_sized_leases_hands_out_few_large_leases(tmp_path):
    from echo2.launch.train import run_training

    config = load_config(overrides=[
        "run.steps=3", "eval.size=10", "eval.every=3", "learner.groups_per_step=8", "rollout.groups_per_lease=device",
        "workers.count=1", "staleness=1", "telemetry.tensorboard=false", "telemetry.progress=false",
        f"run.dir={tmp_path}", "run.name=run"])
    summary = run_training(config)
    reliability = summary.reliability
    assert reliability["groups_trained"] == 24
    # one group first, then up to the 16-slot window each: 4 groups a lease would have taken 6 or more
    assert reliability["leases_issued"] <= 5, reliability
    steps = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["staleness_max"] <= 1 for r in steps if "reward_mean" in r)
