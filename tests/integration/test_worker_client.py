"""A worker pointed at a wrong URL says so clearly and backs off; it gives up after its budget
when it has one, and by default retries until the coordinator answers."""

import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from echo2.protocol import RegisterRequest
from echo2.rollout.client import CoordinatorClient, CoordinatorUnreachable


def test_wrong_url_retries_with_backoff_then_gives_up(caplog):
    client = CoordinatorClient("http://127.0.0.1:9", "token", give_up_after_s=2.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="echo2.worker"):
        with pytest.raises(CoordinatorUnreachable, match=r"cannot reach the coordinator at http://127.0.0.1:9 "
                                                         r"\(registering\).*gave up after"):
            client.register(RegisterRequest(name="w"))
    elapsed = time.monotonic() - started
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert [re.search(r"retrying in (\S+)", m).group(1) for m in retries] == ["0.5s", "1.0s"]  # exponential backoff
    assert "of at most 2s" in retries[-1]
    assert 1.4 <= elapsed <= 2.5


def test_by_default_a_client_retries_until_the_coordinator_answers(caplog):
    """An outage of any length: the client keeps trying (backoff capped) and goes on once the
    coordinator is back (here after 4 s, past the 0.5 + 1 + 2 s of the first backoffs)."""
    from state_support import make_state

    from echo2.coordinator.app import create_app
    from echo2.coordinator.server import CoordinatorServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = CoordinatorServer(create_app(make_state(staleness=1), lease_wait_s=0), "127.0.0.1", port)
    timer = threading.Timer(4.0, server.start, kwargs={"timeout_s": 10})
    timer.start()
    try:
        client = CoordinatorClient(f"http://127.0.0.1:{port}", "t", give_up_after_s=None)
        with caplog.at_level(logging.WARNING, logger="echo2.worker"):
            reply = client.register(RegisterRequest(name="w"))
        assert reply.worker_id
        retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
        assert len(retries) >= 3 and all("until it answers" in m for m in retries)
    finally:
        timer.join()
        server.stop()


def test_worker_command_reports_unreachable_coordinator():
    result = subprocess.run(
        [sys.executable, "-m", "echo2.cli", "worker", "--coordinator", "http://127.0.0.1:9", "--give-up-after", "1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "ECHO2_TOKEN": "t"},
    )
    assert result.returncode != 0
    assert "cannot reach the coordinator at http://127.0.0.1:9 (registering)" in result.stderr
    assert "retrying in 0.5s" in result.stderr
