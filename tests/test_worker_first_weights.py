"""A worker's first weights: a failed fetch is retried, not fatal (``RolloutWorker._fetch_first_weights``)."""

import threading

import pytest

from echo2.broadcast.downloader import BroadcastTimeout, VersionSuperseded
from echo2.rollout.worker import RolloutWorker


@pytest.fixture
def worker():
    worker = RolloutWorker("http://127.0.0.1:9", "token", relay=None)
    yield worker
    worker.client.close()
    worker.http.close()


def test_a_relay_that_went_on_to_a_newer_version_is_asked_again_at_once(worker, monkeypatch):
    """A worker that joined as its relay skipped the version it was told of (a bench's late
    attacker died of exactly this) asks for the newest again and starts."""
    outcomes = [VersionSuperseded("v2 is no longer served (skipped: went on to v3)"), None]
    calls = []

    def fetch():
        calls.append(1)
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome
        worker.version = 3

    monkeypatch.setattr(worker, "_fetch_newest_blocking", fetch)
    worker._fetch_first_weights()
    assert worker.version == 3 and len(calls) == 2


def test_a_worker_asked_to_stop_gives_up_retrying(worker, monkeypatch):
    def fetch():
        threading.Timer(0.05, worker.stop.set).start()
        raise BroadcastTimeout("v1 not complete within 1s")

    monkeypatch.setattr(worker, "_fetch_newest_blocking", fetch)
    worker._fetch_first_weights()  # returns (stopped) instead of raising
    assert worker.stop.is_set() and worker.version == -1
