"""``launcher: ray`` on a local Ray: worker actors train the run, and one killed mid-run is
restarted by Ray while the run carries on."""

import json
import threading
import time

import pytest

from echo2.config import load_config  # noqa: E402
from echo2.launch.ray_actors import namespace  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402

ray = pytest.importorskip("ray")


def _kill_one_actor_mid_run(run_dir, done: threading.Event, killed: list) -> None:
    """Once version 3 is trained, kill actor ray-0 (Ray may restart it: no_restart=False)."""
    while not done.is_set():
        metrics = run_dir / "metrics.jsonl"
        versions = [json.loads(line).get("version", 0) for line in metrics.read_text().splitlines()] \
            if metrics.exists() else []
        if max(versions, default=0) >= 3:
            url = json.loads((run_dir / "coordinator.json").read_text())["url"]
            ray.kill(ray.get_actor("ray-0", namespace=namespace(url)), no_restart=False)
            killed.append(max(versions))
            return
        time.sleep(0.2)


def test_ray_worker_actors_train_and_a_killed_actor_is_restarted(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = load_config(overrides=[
        "launcher=ray", "ray.num_cpus=2", "run.steps=40", "eval.size=20", "eval.every=40",
        "learner.groups_per_step=8", "rollout.groups_per_lease=2", "telemetry.tensorboard=false",
        "telemetry.progress=false", "coordinator.heartbeat_timeout_s=4", "coordinator.lease_timeout_s=10",
        "coordinator.data_timeout_s=120", f"run.dir={tmp_path}", "run.name=run"])
    done, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_one_actor_mid_run, args=(tmp_path / "run", done, killed), daemon=True)
    killer.start()
    try:
        summary = run_training(config)
    finally:
        done.set()
    assert killed, "the run ended before an actor could be killed"
    steps = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["version"] for r in steps if "reward_mean" in r] == list(range(1, 41))  # the run carried on
    contributors = {key.split("/")[1] for r in steps for key in r if key.startswith("worker/")}
    assert contributors <= {"ray-0", "ray-1"} and "ray-1" in contributors
    assert summary.reliability["workers_dead"] >= 1  # the killed worker was declared dead ...
    assert summary.reliability["prompts_unaccounted"] == 0
    log = (summary.run_dir / "workers" / "ray-0.log").read_text()
    assert log.count("registered with") >= 2  # ... and Ray's restart of it registered again
    assert not ray.is_initialized()  # the local Ray started for the run is gone
