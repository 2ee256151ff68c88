"""Polling with a deadline: every wait in the suite names what it waited for."""

from __future__ import annotations

import time


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout_s`` naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s}s for {what}")
        time.sleep(0.2)

