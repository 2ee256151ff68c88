"""A worker pointed at a wrong URL says so clearly, backs off, and gives up after its budget."""

import logging
import os
import subprocess
import sys
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
    assert [m.rsplit("retrying in ", 1)[1] for m in retries] == ["0.5s", "1.0s"]  # exponential backoff
    assert 1.4 <= elapsed <= 2.5


def test_worker_command_reports_unreachable_coordinator():
    result = subprocess.run(
        [sys.executable, "-m", "echo2.cli", "worker", "--coordinator", "http://127.0.0.1:9", "--give-up-after", "1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "ECHO2_TOKEN": "t"},
    )
    assert result.returncode != 0
    assert "cannot reach the coordinator at http://127.0.0.1:9 (registering)" in result.stderr
    assert "retrying in 0.5s" in result.stderr
