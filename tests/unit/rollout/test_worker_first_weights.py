"""A worker's first weights: a failed fetch is retried, not fatal (``RolloutWorker._fetch_first_weights``)."""

import threading

import pytest

from echo2.broadcast.errors import BroadcastTimeout, VersionSuperseded
from echo2.rollout.worker import RolloutWorker


@pytest.fixture
def worker():
    worker = RolloutWorker("http://127.0.0.1:9", "token", relay=None)
    worker.weights.load = lambda payload, sha256: None
    yield worker
    worker.client.close()
    worker.weights.close()


def test_a_relay_that_went_on_to_a_newer_version_is_asked_again_at_once(worker, monkeypatch):
    """A worker that joined as its relay skipped the version it was told of (a bench's late
    attacker died of exactly this) asks for the newest again and starts."""
    outcomes = [VersionSuperseded("v2 is no longer served (skipped: went on to v3)"), None]
    calls = []

    def fetch(held):
        calls.append(held)
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome
        return 3, b"weights", "sha"

    monkeypatch.setattr(worker.weights, "fetch_newest", fetch)
    worker._fetch_first_weights()
    assert worker.version == 3 and calls == [-1, -1]


def test_a_worker_asked_to_stop_gives_up_retrying(worker, monkeypatch):
    def fetch(held):  # noqa: ARG001
        threading.Timer(0.05, worker.stop.set).start()
        raise BroadcastTimeout("v1 not complete within 1s")

    monkeypatch.setattr(worker.weights, "fetch_newest", fetch)
    worker._fetch_first_weights()  # returns (stopped) instead of raising
    assert worker.stop.is_set() and worker.version == -1
