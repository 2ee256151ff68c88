"""A relay on loopback (the ``relay`` fixture) and the coordinator's reachability check against it."""

from __future__ import annotations

import threading

import pytest

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.relay import RelayServer
from echo2.coordinator.relay_check import RelayChecker


@pytest.fixture()
def relay():
    with RelayServer(ChunkStore(keep=2), token="broadcast-secret") as server:
        yield server


def check(url: str, worker_id: str, credential: str = "broadcast-secret") -> tuple[bool, str]:
    verdicts: list[tuple[bool, str]] = []
    done = threading.Event()
    checker = RelayChecker(credential, lambda wid, ok, why: (verdicts.append((ok, why)), done.set()),
                           delays_s=(0.0, 0.1, 0.2), timeout_s=1.0)
    checker.check(worker_id, url)
    assert done.wait(10), "no verdict"
    return verdicts[0]

