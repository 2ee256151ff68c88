"""An async worker asks for its next lease while it generates the current one, and generates the
lease asked ahead with the weights it asked with (a lease's round trip on a link queueing behind
weight transfers took longer than generating it: docs/wan.md)."""

import threading
from types import SimpleNamespace

import pytest

from echo2.core.leasing import worth_asking_ahead
from echo2.protocol import LeaseResponse, SubmitRequest, VersionInfo
from echo2.rollout.worker import RolloutWorker


class Coordinator:
    """The coordinator's side of the worker: grants every lease request; records what happened in what order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.leases = 0
        self.lock = threading.Condition()

    def lease(self, request, wait_s):  # noqa: ARG002
        with self.lock:
            self.leases += 1
            self.log.append(("lease asked at", request.version))
            self.lock.notify_all()
            return LeaseResponse(status="granted", latest_version=request.version, lease_id=f"l{self.leases}",
                                 version=request.version)


def worker_with(protocol: str, monkeypatch, max_turns: int = 1) -> tuple[RolloutWorker, Coordinator]:
    worker = RolloutWorker("http://127.0.0.1:9", "token", relay=None)
    worker.spec = SimpleNamespace(protocol=protocol, groups_per_lease=4, max_turns=max_turns, swap_between_turns=True,
                                  swap_between_steps=False)
    worker.weights.start(worker.spec, lambda payload, sha256: None, worker.session_lost)
    worker.weights.protocol.loaded(3)
    worker.weights.protocol.round_trip_s, worker.weights.protocol.generate_s = 1.0, 0.5  # round trips long
    coordinator = Coordinator()
    monkeypatch.setattr(worker.client, "lease", coordinator.lease)
    monkeypatch.setattr(worker.weights, "try_fetch_newest", lambda what: True)
    monkeypatch.setattr(worker.courier, "send", lambda request: None)

    def generate(lease, version, between_turns, post=None, updates=None):  # noqa: ARG001
        with coordinator.lock:
            coordinator.log.append(("generate", lease.version))
        assert lease.version == worker.version, "a lease generated with other weights than it was granted for"
        return SubmitRequest.model_construct(lease_id=lease.lease_id, version=lease.version, groups=[]), 0.5

    worker.generation = SimpleNamespace(generate=generate, lease_groups=lambda: 4)
    return worker, coordinator


@pytest.fixture
def closing():
    workers = []
    yield workers.append
    for worker in workers:
        worker.ahead.close()
        worker.client.close()
        worker.weights.close()


def test_an_async_worker_asks_for_its_next_lease_while_it_generates(monkeypatch, closing):
    worker, coordinator = worker_with("async", monkeypatch)
    closing(worker)
    asked_while_generating = []

    def generate(lease, version, between_turns, post=None, updates=None):  # noqa: ARG001
        with coordinator.lock:  # the next request arrives while this lease generates
            generated = sum(kind == "generate" for kind, _ in coordinator.log) + 1
            coordinator.log.append(("generate", lease.version))
            asked_while_generating.append(coordinator.lock.wait_for(lambda: coordinator.leases > generated, 5))
        return SubmitRequest.model_construct(lease_id=lease.lease_id, version=lease.version, groups=[]), 0.5

    worker.generation = SimpleNamespace(generate=generate, lease_groups=lambda: 4)
    for _ in range(3):
        assert worker._work_once()
    worker.ahead.take()
    assert asked_while_generating == [True, True, True]
    assert coordinator.leases == 4  # one request per lease, none twice


def test_a_staged_version_stops_asking_ahead_and_is_swapped_in_before_the_next_request(monkeypatch, closing):
    worker, coordinator = worker_with("async", monkeypatch)
    closing(worker)
    assert worker._work_once()  # generates at v3, asked ahead at v3
    with worker.weights.changed:  # v4 fetched in the background meanwhile
        worker.weights._staged = (4, b"", "sha")
        worker.weights.protocol.fetch_ended(4)
    assert worker._work_once()  # the lease asked ahead: at v3, and nothing asked ahead now
    assert worker.version == 3 and worker.ahead.take() is None
    assert worker._work_once()  # v4 swapped in, then asked for
    worker.ahead.take()
    generated = [version for kind, version in coordinator.log if kind == "generate"]
    assert generated == [3, 3, 4] and worker.version == 4


@pytest.mark.parametrize("protocol, max_turns", [("sync", 1), ("pull", 1), ("async", 3)])
def test_no_lease_is_asked_ahead_under_sequential_pull_nor_when_turns_may_swap_weights(monkeypatch, closing,
                                                                                        protocol, max_turns):
    worker, coordinator = worker_with(protocol, monkeypatch, max_turns=max_turns)
    closing(worker)
    for _ in range(2):
        assert worker._work_once()
    assert worker.ahead.take() is None and coordinator.leases == 2


def test_a_lost_session_drops_the_lease_asked_ahead(monkeypatch, closing):
    worker, coordinator = worker_with("async", monkeypatch)
    closing(worker)
    monkeypatch.setattr(worker, "_register", lambda: SimpleNamespace(worker_id="w1"))
    monkeypatch.setattr(worker.client, "version", lambda: VersionInfo(version=3, sha256="0" * 64, size_bytes=1))
    assert worker._work_once()
    worker._register_anew()
    assert worker.ahead.take() is None and worker.version == -1


def test_a_worker_whose_round_trips_are_short_against_its_leases_asks_nothing_ahead(monkeypatch, closing):
    worker, coordinator = worker_with("async", monkeypatch)
    closing(worker)
    worker.weights.protocol.round_trip_s, worker.weights.protocol.generate_s = 0.05, 30.0

    def generate(lease, version, between_turns, post=None, updates=None):  # noqa: ARG001
        return SubmitRequest.model_construct(lease_id=lease.lease_id, version=lease.version, groups=[]), 30.0

    worker.generation = SimpleNamespace(generate=generate, lease_groups=lambda: 4)
    for _ in range(2):
        assert worker._work_once()
    assert worker.ahead.take() is None and coordinator.leases == 2


def test_asking_ahead_is_worth_it_only_once_round_trips_are_long_against_leases():
    assert not worth_asking_ahead(None, 1.0) and not worth_asking_ahead(0.2, None)  # nothing measured yet
    assert worth_asking_ahead(0.18, 0.10)  # the network lab's kernel-shaped links
    assert not worth_asking_ahead(0.2, 40.0)  # a GPU worker's lease over a WAN
