"""Cost-aware activation in a live run: a cheap worker joining parks the expensive one, and
killing the cheap one brings the expensive one back; a preempted worker (SIGTERM) deregisters
(real processes on loopback)."""

import os
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
from waiting import wait_for

from echo2.config import load_config
from echo2.launch.train import run_training
from echo2.learner import interrupts


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_cheap_worker_parks_expensive_one_and_its_death_reactivates_it(tmp_path):
    port, token = free_port(), "live-activation-token"
    url = f"http://127.0.0.1:{port}"
    config = load_config(overrides=[
        f"run.dir={tmp_path}", "run.name=run", "run.steps=100000", "run.max_minutes=3.0", "eval.every=100000",
        "eval.size=20", "learner.groups_per_step=8", "rollout.groups_per_lease=4", "telemetry.tensorboard=false",
        "telemetry.progress=false", "checkpoint.every=0", f"coordinator.port={port}", f"coordinator.token={token}",
        "coordinator.heartbeat_timeout_s=3", "workers.count=1", "emulation.fleet=[{price_per_hour: 3.0}]",
        # a low target keeps the requirement well within what one worker delivers: the tiny model's step
        # time swings tenfold when processes contend for two cores, and the requirement swings with it
        "activation.target_utilization=0.02", "activation.replan_every=2", "activation.learner_price_per_hour=4.0",
    ])
    log_path = tmp_path / "run" / "train.log"
    outcome: dict = {}

    def cheap_worker_joins_then_dies() -> None:
        try:
            wait_for(lambda: log_path.exists() and "step" in log_path.read_text() or _healthy(url), 60, "the run")
            time.sleep(4)
            env = {**os.environ, "ECHO2_TOKEN": token}
            cheap = subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", url,
                                      "--name", "cheap", "--price-per-hour", "0.2", "--give-up-after", "5"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            wait_for(lambda: "parked local-0" in log_path.read_text(), 30, "the expensive worker to be parked")
            cheap.kill()  # no SIGTERM courtesy: it simply vanishes
            cheap.wait(10)
            wait_for(lambda: "activated local-0" in log_path.read_text(), 30, "the expensive worker to come back")
            preempted = subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", url,
                                          "--name", "preempted", "--give-up-after", "5"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            wait_for(lambda: "worker preempted joined" in log_path.read_text(), 30, "the preempted worker to join")
            time.sleep(6)  # let it load the model and start working
            preempted.terminate()  # SIGTERM: finish the request in hand, hand back the rest, deregister
            started = time.monotonic()
            preempted.wait(20)
            outcome["preempted_exit_s"] = time.monotonic() - started
            outcome["ok"] = True
        except Exception as error:  # reported by the assertion below
            outcome["error"] = repr(error)
        finally:
            interrupts.request()  # the run has shown what it is for (or cannot): stop it at the step in hand

    helper = threading.Thread(target=cheap_worker_joins_then_dies, daemon=True)
    helper.start()
    summary = run_training(config)
    helper.join(30)
    text = log_path.read_text()
    assert outcome.get("ok"), (outcome, text[-3000:])
    parked, activated = text.index("parked local-0"), text.index("activated local-0")
    assert parked < activated and re.search(r"activation \(cheap died\)", text)
    assert summary.costs["cost/local-0_usd"] > 0 and summary.costs["cost/cheap_usd"] > 0
    assert summary.costs["cost_centralized_usd"] > summary.costs["cost_usd"] - summary.costs["cost_workers_usd"]
    assert summary.reliability["workers_left"] == 1 and outcome["preempted_exit_s"] < 20
    assert summary.reliability["workers_reactivated"] >= 1  # local-0, parked then activated again
    assert "worker preempted left (deregistered)" in text


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
