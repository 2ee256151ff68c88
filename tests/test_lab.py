"""The network lab itself: kernel-shaped links, NAT that refuses inbound connections, silent and
refusing partitions that heal, and nothing left behind, even when its maker is killed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from lab_support import lab_or_skip, open_lab, probe, sink

from echo2.lab import HostSpec
from echo2.lab.commands import namespaces


@pytest.fixture(scope="module")
def lab():
    with open_lab([HostSpec("learner"), HostSpec("w1", 40, 80), HostSpec("w2", 40, 40, nat=True)]) as lab:
        servers = [sink(lab, "learner"), sink(lab, "w2")]
        time.sleep(1.0)
        yield lab
        for server in servers:
            server.kill()


@pytest.mark.integration
def test_links_are_shaped_by_the_kernel_in_each_direction(lab):
    """5 MB up a 40 Mbit/s uplink takes ~1 s; the same down an 80 Mbit/s downlink ~0.5 s."""
    outcome, up_s = probe(lab, "w1", lab.address("learner"), 5_000_000, timeout_s=10)
    assert outcome == "ok" and 0.85 < up_s < 1.5, up_s
    server = sink(lab, "w1")
    try:
        time.sleep(0.5)
        outcome, down_s = probe(lab, "learner", lab.address("w1"), 5_000_000, timeout_s=10)
    finally:
        server.kill()
    assert outcome == "ok" and 0.4 < down_s < 0.8, down_s


def test_a_host_behind_nat_connects_out_and_accepts_nothing(lab):
    assert probe(lab, "w2", lab.address("learner"))[0] == "ok"
    assert probe(lab, "learner", lab.address("w2"))[0] == "ConnectionRefusedError"  # its router: no port open
    assert probe(lab, "learner", lab.own_address("w2"))[0] != "ok"  # its private address: no route
    assert lab.own_address("w2") != lab.address("w2")


@pytest.mark.integration
def test_partitions_drop_silently_or_refuse_and_heal(lab):
    learner = lab.address("learner")
    with lab.partition("w1"):
        outcome, seconds = probe(lab, "w1", learner, timeout_s=1.5)
        assert outcome == "TimeoutError" and seconds >= 1.4  # dropped without a word
        assert probe(lab, "w2", learner)[0] == "ok"
    with lab.partition("w1", mode="reject"):
        outcome, seconds = probe(lab, "w1", learner)
        assert outcome != "ok" and seconds < 0.5  # refused at once
    with lab.partition("w2", "learner"):
        assert probe(lab, "w2", learner, timeout_s=1.0)[0] == "TimeoutError"
        assert probe(lab, "w1", learner)[0] == "ok"  # only that pair is cut
    assert probe(lab, "w1", learner)[0] == "ok" and probe(lab, "w2", learner)[0] == "ok"


MAKER = """
import signal, sys, time
from echo2.lab import HostSpec, Lab
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even when started in the background
lab = Lab([HostSpec("a"), HostSpec("b", 10, 10, nat=True)])
lab.start()
lab.popen("a", [sys.executable, "-c", "import time; time.sleep(600)"])
print(lab.prefix, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_nothing_is_left_behind_when_the_maker_is_killed(how):
    lab_or_skip(nat=True)  # skips (or fails in CI) where a lab cannot be built
    maker = subprocess.Popen([sys.executable, "-c", MAKER], stdout=subprocess.PIPE, text=True)
    prefix = maker.stdout.readline().strip()
    assert prefix and namespaces(prefix), "the maker built no lab"
    maker.send_signal(9 if how == "SIGKILL" else 2)
    maker.wait(timeout=30)
    deadline = time.monotonic() + 30
    while namespaces(prefix) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert namespaces(prefix) == []
