"""Broadcast peers on loopback for the broadcast tests: random payloads, a relay peer (a chunk store
behind its own server), the ``peers`` fixture that closes them, and a store that tampers with chunks."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from safetensors.numpy import save as save_numpy

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.relay import RelayServer
from echo2.broadcast.throttle import Throttle

KIB = 1024
FAST = {"stall_s": 1.0, "poll_s": 0.5, "timeout_s": 20.0}


def random_payload(nbytes: int, seed: int = 0) -> bytes:
    return save_numpy({"w": np.frombuffer(np.random.default_rng(seed).bytes(nbytes), dtype=np.float32)})


# ---------------------------------------------------------------------- end to end on loopback
class Peer:
    """A node as a worker will run it: a store, a capped relay, a downloader thread."""

    def __init__(self, cap, store=None):
        self.store = store or ChunkStore()
        self.relay = RelayServer(self.store, throttle=Throttle(cap)).start()
        self.url, self.result, self.error = self.relay.url, None, None
        self.cancel = threading.Event()

    def fetch(self, version, sources, **options):
        def run():
            try:
                self.result = fetch_version(version, sources, self.store, cancel=self.cancel, **{**FAST, **options})
            except BaseException as error:  # noqa: BLE001 - inspected by the test
                self.error = error

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def kill(self):
        self.cancel.set()
        self.relay.stop(timeout_s=3, abort=True)


@pytest.fixture
def peers():
    started = []

    def make(cap, store=None):
        started.append(Peer(cap, store))
        return started[-1]

    yield make
    for peer in started:
        peer.cancel.set()
        peer.relay.stop(timeout_s=3)


class TamperingStore(ChunkStore):
    """Serves chunk 3 with one bit flipped (a faulty or malicious relay)."""

    async def aget_chunk(self, version, index, wait_s=0.0):
        data = await super().aget_chunk(version, index, wait_s)
        return bytes([data[0] ^ 1]) + data[1:] if data is not None and index == 3 else data

