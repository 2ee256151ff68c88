"""SIGTERM (and Ctrl-C) stop a run at a step boundary, never inside one.

A signal raises ``KeyboardInterrupt`` in the main thread. Inside :func:`deferred` (the learner
loop wraps each step: take the batch, train, publish, log, evaluate, checkpoint) it is held until
the step ends, so the run stops on a consistent version, which it checkpoints, and still writes
its reliability report and summary; a second signal while one is held stops at once. A wait for
data that has taken nothing yet polls :func:`requested` and stops at once (a batch taken but not
trained would otherwise count as trained). Outside, e.g. while the run starts, it is raised at once.
A program that runs training in its own process (a notebook, a test, a service) asks for the same
stop from any thread with :func:`request`.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_pending: int | None = None


def interrupt(signum: int, frame: object) -> None:  # noqa: ARG001 - a signal handler's signature
    global _pending
    if _depth and _pending is None:
        _pending = signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    """Route SIGTERM and SIGINT through :func:`interrupt` (main thread only)."""
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def request() -> None:
    """Stop the run at the end of the step in hand, as SIGTERM does, from any thread."""
    global _pending
    if _pending is None:
        _pending = signal.SIGTERM


def clear() -> None:
    """Forget a stop asked for before a run began (it was not that run's)."""
    global _pending
    _pending = None


def requested() -> bool:
    """Is a stop signal held?"""
    return _pending is not None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal until the block ends, then raise it."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0 and _pending is not None:
        signum, _pending = _pending, None
        raise KeyboardInterrupt(f"signal {signum} (held until the step ended)")
