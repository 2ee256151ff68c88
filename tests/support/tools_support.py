"""Tools that hang, spin, raise or hoard memory, and a tool runner (the ``runner`` fixture)."""

from __future__ import annotations

import time

import pytest

from echo2.tasks.tools import ToolRunner, calculate


def hangs(seconds: float = 60.0) -> str:
    time.sleep(seconds)
    return "too late"


def spins() -> str:
    while True:
        pass


def raises(message: str) -> str:
    raise RuntimeError(message)


def hoards() -> str:
    blocks = [bytearray(64 * 1024 * 1024) for _ in range(64)]  # 4 GiB, far past the limit
    return str(len(blocks))


@pytest.fixture(scope="module")
def runner():
    return ToolRunner({"calculate": calculate, "hangs": hangs, "spins": spins, "raises": raises,
                       "hoards": hoards}, timeout_s=1.0, memory_mb=512)

