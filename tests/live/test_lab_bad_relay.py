"""A trickling relay at the head of the relay plan, on lab hosts: every honest worker still holds
each new version within ``broadcast.stall_s`` plus one version's transfer time of its publish.

The trickler is ``bench/attacks.py``'s own attacker (a registered worker whose relay declares
1e12 B/s, answers the coordinator's check, serves the real manifest and sends each chunk at two
bytes a second), run in its own host; the honest workers are ``echo2 worker`` in two others,
relaying to each other, the learner in a fourth. Before the rate rule, its children stayed on it
and the published version stood still for 145 s (docs/security.md)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from lab_support import open_lab
from paths import REPO
from waiting import wait_for

from echo2.lab import HostSpec
from echo2.lab.rehearsal import LabRun

STALL_S = 4.0
LINK_MBPS = 50.0
#: Two cores shared by the learner, two workers and the attacker: a heartbeat period of reporting
#: aside (fetch events carry their own times), what a loaded host adds to a transfer.
SLACK_S = 3.0
RUN = ["run.steps=100000", "learner.groups_per_step=4", "rollout.groups_per_lease=2", "staleness=2",
       "eval.every=100000", "eval.size=20", "eval.show=0", "telemetry.tensorboard=false", "checkpoint.every=0",
       "broadcast.encoding=full", "broadcast.mode=pipelined", "activation.enabled=false",
       f"broadcast.stall_s={STALL_S:g}", "coordinator.data_timeout_s=600"]
HONEST = ("a", "b")
CLEAN_S, ATTACK_S = 12.0, 40.0


def timeline(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines() if line.strip()]


def held_within(publishes: list[tuple[float, int]], fetches: list[tuple[float, int]], since: float,
                until: float) -> list[float]:
    """For each version published between ``since`` and ``until`` (``publishes``: (time, version)),
    how long after its publish the worker (``fetches``: (end, version) of its loads) first held it
    or a newer one (inf: never)."""
    delays = []
    for published_at, version in publishes:
        if since <= published_at <= until:
            held = [end for end, loaded in fetches if loaded >= version and end >= published_at]
            delays.append(min(held, default=float("inf")) - published_at)
    return delays


def test_a_trickling_relay_in_the_plan_delays_no_honest_worker_past_a_stall_and_a_transfer(tmp_path):
    hosts = [HostSpec(name, LINK_MBPS, LINK_MBPS) for name in ("learner", *HONEST, "bad")]
    lab = open_lab(hosts)
    run_dir = tmp_path / "run"
    with lab:
        run = LabRun(lab, "learner", run_dir, RUN)
        with run:
            for name in HONEST:
                run.worker(name, name, "--upload-mbps", str(LINK_MBPS))
            for name in HONEST:
                run.wait_for_worker_line(name, r"groups accepted", 300)
            clean_from = time.time()
            time.sleep(CLEAN_S)
            attack_log = tmp_path / "trickler.jsonl"
            params = {"duration_s": ATTACK_S, "bind_host": "0.0.0.0", "advertise_host": lab.own_address("bad")}
            with (tmp_path / "trickler.log").open("w") as out:
                trickler = lab.popen("bad", [sys.executable, str(REPO / "bench" / "attacks.py"), "--attacker",
                                             "--kind", "trickle_relay", "--name", "trickler", "--coordinator", run.url,
                                             "--run-dir", str(run_dir), "--log", str(attack_log),
                                             "--params", json.dumps(params)],
                                     stdout=out, stderr=out,
                                     env={**os.environ, "ECHO2_TOKEN": (run_dir / "token").read_text().strip()})
            try:
                wait_for(lambda: attack_log.exists() and "attack_start" in attack_log.read_text(), 120,
                           "attack start")
                attack_from = time.time()
                wait_for(lambda: "attack_end" in attack_log.read_text(), ATTACK_S + 60, "attack end")
                time.sleep(5)  # the workers' last fetch events reach the coordinator with their heartbeats
                run.learner.send_signal(signal.SIGTERM)
                assert run.wait(300) == 0, run.logs
            finally:  # it lingers, heartbeating, until the run is over
                trickler.kill()
                trickler.wait(timeout=30)
    events = timeline(run_dir)
    publishes = [(e["end"], e["version"]) for e in events if e["who"] == "learner" and e["kind"] == "train"]
    log = (run_dir / "train.log").read_text()
    served = [json.loads(line) for line in attack_log.read_text().splitlines() if '"attack_end"' in line]
    assert served and served[0]["requests"] > 0, (served, log[-3000:])  # it was some worker's source
    for name in HONEST:
        fetches = [(e["end"], e["version"]) for e in events if e["who"] == name and e["kind"] == "fetch"]
        transfer_s = max(e["end"] - e["start"] for e in events
                         if e["who"] == name and e["kind"] == "fetch" and clean_from <= e["start"] <= attack_from)
        bound = STALL_S + transfer_s + SLACK_S
        delays = held_within(publishes, fetches, attack_from, attack_from + ATTACK_S - bound)
        assert delays, f"{name}: no version published under the attack"
        worst = max(delays)
        print(f"{name}: {len(delays)} versions under the attack, held within {worst:.1f}s at worst "
              f"(bound {bound:.1f}s: stall {STALL_S:g}s + transfer {transfer_s:.2f}s + slack {SLACK_S:g}s)")
        assert worst <= bound, (name, sorted(delays)[-5:], run.worker_log(name)[-3000:])
    assert "no peer's source for" in log  # the coordinator took it out of the plan
