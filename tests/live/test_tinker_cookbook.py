"""An unmodified ``tinker-cookbook`` recipe trains through ``echo2 serve``: ``recipes/math_rl``'s
arithmetic environment on SmolLM2-135M-Instruct, the cookbook (0.5.8, pinning transformers 5.5.4)
in a virtualenv of its own as a user's training program is, its sampling done by a worker process.

A short synchronous run checks that every call of the recipe's loop is served: its steps logged,
the fleet's sampling log-probs equal to the trainer's (the cookbook's own
``optim/kl_sample_train_v1``), its checkpoints durable ``tinker://`` saves. The quick variant of
``bench/tinker_service.py`` runs the recipe's asynchronous mode (``max_steps_off_policy=2``) beside
echo2's own loop on the same problem. Whether the recipe *learns* is the bench's full run.
"""

import json
import os
import subprocess
import sys

import pytest
from paths import REPO
from service_support import Served

from echo2.model.sources import ModelSourceError, resolve_model_path
from echo2.service.keys import DEFAULT_TENANT

COOKBOOK_PYTHON = REPO / ".venv-cookbook" / "bin" / "python"
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2() -> str:
    if not COOKBOOK_PYTHON.exists() and not os.environ.get("CI"):
        pytest.skip(f"the cookbook's own virtualenv is not built here ({COOKBOOK_PYTHON}; .ci/run builds it)")
    assert COOKBOOK_PYTHON.exists(), f"{COOKBOOK_PYTHON} missing: .ci/run builds the cookbook's virtualenv"
    try:
        return resolve_model_path(MODEL)
    except ModelSourceError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(error))


def test_the_cookbook_arithmetic_recipe_runs_unmodified_against_the_service(smollm2, tmp_path):
    served = Served(tmp_path / "service", f"model.name={MODEL}", "workers.count=1")
    log_path = tmp_path / "recipe"
    try:
        arguments = ["env=arithmetic", f"base_url={served.url}", f"model_name={smollm2}", "renderer_name=role_colon",
                     "loss_fn=importance_sampling", "groups_per_batch=2", "group_size=4", "max_tokens=8",
                     "max_steps=3", "lora_rank=8", "learning_rate=1e-4", f"log_path={log_path}",
                     "behavior_if_log_dir_exists=delete", "eval_every=0", "save_every=2"]
        environment = {**os.environ, "TINKER_API_KEY": served.key, "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"}
        run = subprocess.run([str(COOKBOOK_PYTHON), "-m", "tinker_cookbook.recipes.math_rl.train", *arguments],
                             capture_output=True, text=True, timeout=600, env=environment, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        steps = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
        trained = [s for s in steps if "optim/kl_sample_train_v1" in s]
        assert len(trained) >= 3
        assert all(abs(s["optim/kl_sample_train_v1"]) < 1e-3 for s in trained)  # the fleet's log-probs are the trainer's
        saves = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
        assert saves and all(s["state_path"].startswith("tinker://") for s in saves)
        run_id = saves[-1]["state_path"].removeprefix("tinker://").split("/")[0]
        assert (served.folder / "checkpoints" / DEFAULT_TENANT / run_id / "weights").is_dir()  # the operator's key
        assert sum(w["groups"] for w in served.dashboard()["workers"]) >= 3 * 2  # sampled by the worker process
    finally:
        served.close()


def test_tinker_service_bench_quick(smollm2, tmp_path):
    """``bench/tinker_service.py --quick``: the recipe's async mode through the service beside echo2's
    own loop, each its steps, the API layer's own time counted."""
    bench = subprocess.run([sys.executable, str(REPO / "bench" / "tinker_service.py"), "--quick", "--out", str(tmp_path),
                            "--runs", "native,api-async2"], capture_output=True, text=True, timeout=900)
    assert bench.returncode == 0, bench.stderr[-3000:]
    native, api = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert (native["arm"], api["arm"]) == ("native", "api-async2")
    assert native["steps"] == 3 and native["samples"] == 3 * 8 * 4
    # the async loop logs a step's rewards with the batch it trains on: the last may not be trained yet
    assert api["steps"] >= 2 and api["samples"] == api["steps"] * 8 * 4
    assert api["samples_returned"] >= api["samples"]  # off-policy: the recipe may sample more than it trains on
    assert api["api_requests"] > 3 * 8 and 0 < api["api_share"] < 0.2 and api["training_s"] > 0
    assert native["samples_per_s"] > 0 and api["samples_per_s_vs_native"] > 0
    assert (tmp_path / "tinker_service.png").stat().st_size > 0
