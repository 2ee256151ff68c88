"""bench/gpu_check.py's CPU smoke run (tiny model, --quick): every check runs and its numbers make sense.

The GPU-sized run (SmolLM2-135M's shape, bf16 on CUDA) is recorded in docs/results/gpu-check.json;
this only keeps the script working where CI runs, on a CPU.
"""

import json
import subprocess
import sys

from paths import REPO


def test_gpu_check_tiny_on_cpu(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--device", "cpu", "--tiny",
                             "--quick", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "unchanged_frac" in result.stdout
    report = json.loads((tmp_path / "results.json").read_text())
    rows = report["rows"]
    assert report["meta"]["tiny"] and report["meta"]["device"] == "cpu"

    generate = {r["variant"].split(" (")[0]: r for r in rows if r["check"] == "generate"}
    today, fast = generate["today"], generate["fast"]
    assert today["rows"] == fast["rows"] == 16 and today["new_tokens"] == fast["new_tokens"] == 8
    for row in (today, fast):
        assert row["samples_per_s"] > 0 and abs(row["tokens_per_s"] / row["samples_per_s"] - row["new_tokens"]) < 1e-6
    assert today["speedup"] == 1.0 and fast["speedup"] > 0 and fast["first_call_s"] > 0

    logprobs = {r["variant"].split(" (")[0]: r for r in rows if r["check"] == "logprobs"}
    assert logprobs["fp32 sample vs fp32 score"]["max_abs_nats"] < 1e-3
    mixed = logprobs["bf16 sample vs fp32 master + bf16 autocast"]
    assert mixed["ok"] and mixed["mean_abs_nats"] < report["meta"]["logprob_tolerance"]
    fast_mixed = logprobs["fast path: bf16 sample vs fp32 master + bf16 autocast"]
    assert fast_mixed["ok"] and "64/64 completions token-identical" in fast_mixed["note"]

    learner = {r["variant"]: r for r in rows if r["check"] == "learner"}
    full_master, full_bf16 = learner["full, trainable in float32"], learner["full, trainable in bfloat16"]
    assert full_master["max_abs_delta"] > 0 and full_master["unchanged_frac"] < 0.1
    assert full_bf16["unchanged_frac"] > 0.9  # lr 1e-6 is below half a bf16 step of most weights
    lora_master, lora_bf16 = learner["lora, trainable in float32"], learner["lora, trainable in bfloat16"]
    assert lora_master["max_abs_delta"] > 0
    assert lora_master["unchanged_frac_2steps"] < 0.1 < 0.4 < lora_bf16["unchanged_frac_2steps"]

    vllm = [r for r in rows if r["check"] == "vllm"]
    assert len(vllm) == 1 and vllm[0]["note"]
