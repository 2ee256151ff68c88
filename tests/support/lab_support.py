"""What the network-lab tests share: a lab or a reasoned skip (never a skip in CI, which runs as
root and must run them), and a TCP probe run inside a host."""

from __future__ import annotations

import os
import sys
import time

import pytest

from echo2.lab import HostSpec, Lab, LabUnavailable
from echo2.lab.commands import require

#: Inside a host: connect to ARGV[1]:ARGV[2] (2 s timeout), send ARGV[3] bytes, wait for the
#: sink's one-byte answer; print "ok SECONDS" or "fail ERROR SECONDS".
PROBE = """
import socket, sys, time
started = time.time()
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
    s.sendall(b"x" * int(sys.argv[3])); s.shutdown(socket.SHUT_WR); s.recv(1)
    print("ok", time.time() - started)
except OSError as error:
    print("fail", type(error).__name__, time.time() - started)
"""
#: Inside a host: accept connections on port 9000, read each to its end, answer one byte.
SINK = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000)); s.listen(16)
while True:
    c, _ = s.accept()
    while c.recv(1 << 16):
        pass
    c.sendall(b"k"); c.close()
"""


def lab_or_skip(nat: bool = False) -> None:
    """Skip (with what is missing) where a lab cannot be built; in CI, fail instead."""
    try:
        require(nat=nat)
    except LabUnavailable as missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the network-lab tests: {missing}")
        pytest.skip(str(missing))


def open_lab(hosts: list[HostSpec]) -> Lab:
    lab_or_skip(nat=any(h.nat for h in hosts))
    return Lab(hosts)


def probe(lab: Lab, source: str, target: str, size: int = 0, timeout_s: float = 2.0) -> tuple[str, float]:
    """Send ``size`` bytes from ``source`` to the sink at ``target`` (an address); (outcome, seconds)."""
    out = lab.run(source, [sys.executable, "-c", PROBE, target, "9000", str(size), str(timeout_s)],
                  capture_output=True, text=True, timeout=120).stdout.split()
    return (out[0] if out[0] == "ok" else out[1]), float(out[-1])


def sink(lab: Lab, host: str):
    return lab.popen(host, [sys.executable, "-c", SINK])


@pytest.fixture(scope="module")
def lab():
    """A learner and two workers (one behind NAT) with a sink on each end, for the link tests."""
    with open_lab([HostSpec("learner"), HostSpec("w1", 40, 80), HostSpec("w2", 40, 40, nat=True)]) as lab:
        servers = [sink(lab, "learner"), sink(lab, "w2")]
        time.sleep(1.0)
        yield lab
        for server in servers:
            server.kill()

