"""A real worker process paused past the heartbeat timeout (SIGSTOP: a long GC pause, a suspended
VM, a partition) is declared dead, registers anew when it wakes, and loads the version it held
from its own store: nothing on the wire (real processes on loopback)."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from waiting import wait_for

from echo2.config import load_config
from echo2.launch.train import run_training
from echo2.learner import interrupts

LOADED = re.compile(r"v(\d+): \d+ chunks in \S+ \((.*)\)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_worker_paused_past_its_heartbeat_timeout_rejoins_with_the_version_it_held(tmp_path):
    port, token = free_port(), "rejoin-token"
    url, worker_log = f"http://127.0.0.1:{port}", tmp_path / "worker.log"
    config = load_config(overrides=[
        f"run.dir={tmp_path}", "run.name=run", "run.steps=100000", "run.max_minutes=3.0", "eval.every=100000",
        "eval.size=20", "telemetry.tensorboard=false", "telemetry.progress=false", "checkpoint.every=0",
        f"coordinator.port={port}", f"coordinator.token={token}", "coordinator.heartbeat_timeout_s=3",
        "workers.count=0", "activation.enabled=false", "staleness=0",
        # a step takes 48 one-group leases: a version loaded is the newest for a few seconds, so the
        # pause below begins before the learner can publish the next
        "learner.groups_per_step=48", "rollout.groups_per_lease=1",
    ])
    outcome: dict = {}

    def pause_the_worker() -> None:
        try:
            with worker_log.open("w") as log:
                worker = subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", url,
                                           "--name", "sleeper", "--give-up-after", "30"],
                                          stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ECHO2_TOKEN": token})
            outcome["worker"] = worker
            wait_for(lambda: len(LOADED.findall(worker_log.read_text())) >= 2, 60, "the worker's second version")
            loaded = len(LOADED.findall(worker_log.read_text()))
            wait_for(lambda: len(LOADED.findall(worker_log.read_text())) > loaded, 30, "a fresh version")
            os.kill(worker.pid, signal.SIGSTOP)
            outcome["held"] = int(LOADED.findall(worker_log.read_text())[-1][0])
            time.sleep(6)  # twice the heartbeat timeout: declared dead meanwhile
            os.kill(worker.pid, signal.SIGCONT)
            wait_for(lambda: "registered again" in worker_log.read_text(), 30, "the worker to register again")
            wait_for(lambda: LOADED.search(worker_log.read_text().partition("registered again")[2]), 30,
                     "the worker's first version after it registered again")
            outcome["ok"] = True
        except Exception as error:  # reported by the assertion below
            outcome["error"] = repr(error)
        finally:
            interrupts.request()  # the run has shown what it is for (or cannot): stop it at the step in hand

    helper = threading.Thread(target=pause_the_worker, daemon=True)
    helper.start()
    try:
        summary = run_training(config)
        helper.join(30)
    finally:
        if "worker" in outcome:
            outcome["worker"].kill()
            outcome["worker"].wait(10)
    text = worker_log.read_text()
    assert outcome.get("ok"), (outcome, text[-3000:])
    held = outcome["held"]
    assert re.search(rf"kept .*\bv{held} \(", text), text[-3000:]
    after = text[text.index("registered again"):]
    first_load = LOADED.search(after)
    assert first_load and int(first_load.group(1)) == held and first_load.group(2) == "all held", after[:2000]
    assert summary.reliability["workers_dead"] == 1 and summary.reliability["prompts_unaccounted"] == 0
