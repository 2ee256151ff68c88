"""The network lab itself: kernel-shaped links, NAT that refuses inbound connections, silent and
refusing partitions that heal, and nothing left behind, even when its maker is killed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from lab_support import (
    lab,  # noqa: F401 (fixtures)
    lab_or_skip,
    probe,
)

from echo2.lab.commands import namespaces


def test_a_host_behind_nat_connects_out_and_accepts_nothing(lab):
    assert probe(lab, "w2", lab.address("learner"))[0] == "ok"
    assert probe(lab, "learner", lab.address("w2"))[0] == "ConnectionRefusedError"  # its router: no port open
    assert probe(lab, "learner", lab.own_address("w2"))[0] != "ok"  # its private address: no route
    assert lab.own_address("w2") != lab.address("w2")


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
