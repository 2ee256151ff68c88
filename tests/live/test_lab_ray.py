"""``launcher: ray`` across lab hosts: a Ray head on the learner's host (no CPUs of its own), Ray
nodes on two worker hosts; the run's worker actors are spread over the other hosts, and when one
node dies the coordinator declares its worker dead, Ray restarts that actor on the node left,
echo2 calls its run again, the worker joins from that host and works there, and the run stops
cleanly with every prompt accounted for."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from lab_support import open_lab

from echo2.lab import HostSpec
from echo2.lab.commands import run as tool
from echo2.lab.rehearsal import LabRun

ray = pytest.importorskip("ray")
RAY = str(Path(sys.executable).parent / "ray")


def start_ray_node(lab, host: str, env: dict, head: str | None, temp: str) -> None:
    """``ray start`` inside ``host``: the head (no CPUs: the learner's host places no worker) or a
    node of 2 CPUs joining it; each with a short temp dir of its own (Unix socket paths are short)."""
    role = ["--head", "--port", "6379", "--num-cpus", "0"] if head is None else \
        ["--address", f"{head}:6379", "--num-cpus", "2"]
    done = lab.run(host, [RAY, "start", *role, "--node-ip-address", lab.address(host), "--temp-dir", temp,
                          "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ray_places_workers_on_other_hosts_and_restarts_a_dead_nodes_actor(tmp_path):
    lab = open_lab([HostSpec("learner"), HostSpec("w1"), HostSpec("w2")])
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_health_check_period_ms": "1000",
           "RAY_health_check_failure_threshold": "5"}
    env.pop("RAY_ADDRESS", None)
    head = lab.address("learner")
    temps = {host: tempfile.mkdtemp(prefix="echo2-ray-", dir="/tmp") for host in ("learner", "w1", "w2")}
    try:
        with lab:
            start_ray_node(lab, "learner", env, None, temps["learner"])
            for host in ("w1", "w2"):
                start_ray_node(lab, host, env, head, temps[host])
            check_run(lab, tmp_path, env, head)
    finally:
        for temp in temps.values():
            shutil.rmtree(temp, ignore_errors=True)


def check_run(lab, tmp_path: Path, env: dict, head: str) -> None:
    """Train with two actors on the Ray cluster; kill the node of one mid-run."""
    overrides = ["launcher=ray", f"ray.address={head}:6379", "workers.count=2", "ray.cpus_per_worker=1",
                 "run.steps=600", "eval.every=1000", "eval.size=20", "eval.show=0", "learner.groups_per_step=4",
                 "rollout.groups_per_lease=2", "telemetry.tensorboard=false", "checkpoint.every=0",
                 "coordinator.heartbeat_timeout_s=6", "coordinator.lease_timeout_s=15",
                 "coordinator.data_timeout_s=300"]
    run = LabRun(lab, "learner", tmp_path / "run", overrides, env=env)  # the driver presents the token too
    with run:
        log = tmp_path / "run" / "train.log"
        deadline = time.monotonic() + 240
        while len(re.findall(r"worker ray-\d joined", log.read_text() if log.exists() else "")) < 2:
            assert time.monotonic() < deadline, "the actors did not join"
            time.sleep(0.5)
        joined = log.read_text()
        hosts = dict(re.findall(r"worker (ray-\d) joined as \S+ \(relay http://(10\.77\.\d+\.2):", joined))
        assert set(hosts.values()) == {lab.address("w1"), lab.address("w2")}, joined  # one on each host
        on_w1 = next(name for name, address in hosts.items() if address == lab.address("w1"))
        for pid in tool("ip", "netns", "pids", lab.namespace("w1")).split():  # the w1 node dies
            os.kill(int(pid), 9)
        rejoin = rf"worker {on_w1} joined as \S+ \(relay http://(10\.77\.\d+\.2):"
        while len(re.findall(rejoin, log.read_text())) < 2:
            assert time.monotonic() < deadline + 240 and run.learner.poll() is None, "the actor did not come back"
            time.sleep(0.5)
        time.sleep(5)  # it works from its new host for a while
        run.learner.send_signal(signal.SIGTERM)  # a clean stop: no need to play the 600 steps out
        assert run.wait(300) == 0, run.logs
    text = log.read_text()
    assert re.search(rf"worker {on_w1} silent for \S+: declared dead", text), text
    rejoined = re.findall(rejoin, text)
    assert rejoined[1:] == [lab.address("w2")], text  # restarted once, on the node left
    assert re.search(r"\d+ steps in", text)  # the run stopped cleanly, its summary written
    summary = json.loads((tmp_path / "run" / "reliability.json").read_text())
    assert summary["prompts_unaccounted"] == 0 and summary["groups_trained_twice"] == 0
