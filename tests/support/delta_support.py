"""Delta-encoded versions for the delta tests: two versions' bytes, a relay node, a learner that
publishes deltas (the ``learner`` fixture)."""

from __future__ import annotations

# ---------------------------------------------------------------- delta versions through relays
from contextlib import contextmanager  # noqa: E402

import numpy as np
import pytest
import torch  # noqa: E402

from echo2.broadcast.chunk_store import ChunkStore  # noqa: E402
from echo2.broadcast.publisher import Publisher  # noqa: E402
from echo2.broadcast.relay import RelayServer  # noqa: E402
from echo2.config import BroadcastConfig  # noqa: E402


def versions(n: int = 100_003, seed: int = 0) -> tuple[bytes, bytes]:
    """Two float32 'versions' a small update apart (and a length that fills no whole word)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(n // 4).astype(np.float32)
    new = base + (rng.standard_normal(base.shape) * 1e-5).astype(np.float32)
    return base.tobytes() + b"tai", new.tobytes() + b"taj"


class Node:
    """A worker's two stores behind its relay."""

    def __init__(self) -> None:
        self.store, self.deltas = ChunkStore(), ChunkStore()
        self.relay = RelayServer(self.store, deltas=self.deltas).start()

    def close(self) -> None:
        self.relay.stop()


@contextmanager
def publishing(moved=lambda model: list(model.parameters())):
    """A learner publishing three versions of a small model, with deltas: between two versions
    the parameters ``moved(model)`` take a training-like step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    publisher = Publisher(BroadcastConfig(encoding="delta", chunk_mib=0.004), keep_versions=3, token=None)
    relay = RelayServer(publisher.store, deltas=publisher.deltas).start()
    infos = []
    for version in range(3):
        infos.append(publisher.publish(version, model))
        with torch.no_grad():
            for p in moved(model):
                p.add_(torch.randn_like(p) * 1e-4)
    try:
        yield publisher, relay, infos
    finally:
        relay.stop()
        publisher.close()


@pytest.fixture
def learner():
    with publishing() as published:
        yield published

