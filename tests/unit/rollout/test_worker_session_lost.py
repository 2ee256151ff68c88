"""A worker the coordinator forgot (a killed learner resumed) drops what it was fetching from the
dead learner at once, instead of waiting out the fetch timeout before it registers again."""

import threading
import time
from types import SimpleNamespace

from echo2.protocol import VersionInfo
from echo2.rollout.client import SessionLost
from echo2.rollout.worker import RolloutWorker

SPEC = SimpleNamespace(heartbeat_interval_s=0.05, protocol="async", swap_between_turns=False, swap_between_steps=False,
                       max_turns=1)


def test_a_lost_session_cancels_the_fetch_in_flight_and_the_wait_for_it(monkeypatch):
    worker = RolloutWorker("http://127.0.0.1:9", "token", relay=None, fetch_timeout_s=60)
    worker.spec = SPEC
    worker.weights.start(SPEC, lambda payload, sha256: None, worker.session_lost)
    monkeypatch.setattr(worker.client, "heartbeat", lambda beat: (_ for _ in ()).throw(
        SessionLost(401, "unknown session")))
    in_flight = worker.weights._cancelled  # what a background fetch of the dead learner's version holds
    heartbeats = threading.Thread(target=worker._heartbeats, daemon=True)
    try:
        heartbeats.start()
        started = time.monotonic()
        worker.weights.swap_in(wait_s=worker.fetch_timeout_s)  # a "refresh" lease: wait for the staged version
        waited = time.monotonic() - started
    finally:
        worker._finished.set()
        heartbeats.join(5)
        worker.client.close()
        worker.weights.close()
    assert waited < 5, f"waited {waited:.1f}s for a fetch from a learner that is gone"
    assert in_flight.is_set() and not worker.weights._cancelled.is_set()  # the next fetches start uncancelled
    assert worker.session_lost.is_set() and worker.version == -1  # nothing swapped in: it registers again


def test_a_worker_declared_dead_during_its_first_download_registers_again_and_goes_on(monkeypatch):
    """A partition while a worker fetches its first weights outlasts the dead-worker timeout: the
    coordinator answers 410 when it is back, and the worker must register again, not exit."""
    worker = RolloutWorker("http://127.0.0.1:9", "token", relay=None, fetch_timeout_s=60)
    worker.weights.start(SPEC, lambda payload, sha256: None, worker.session_lost)
    outcomes = [SessionLost(410, "this worker was declared dead (no heartbeat); register again"), True]

    def fetch(what: str) -> bool:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    registrations = []
    monkeypatch.setattr(worker.weights, "try_fetch_newest", fetch)
    monkeypatch.setattr(worker, "_register", lambda: registrations.append(1) or SimpleNamespace(worker_id="w1"))
    monkeypatch.setattr(worker.client, "version", lambda: VersionInfo(version=0, sha256="0" * 64, size_bytes=1))
    try:
        worker._fetch_first_weights()
    finally:
        worker.client.close()
        worker.weights.close()
    assert registrations == [1] and outcomes == []  # registered once more, then fetched
    assert worker.weights._epoch == 1 and not worker.session_lost.is_set()
