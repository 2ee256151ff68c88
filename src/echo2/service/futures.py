"""The service's futures: every mutating Tinker call answers a request id at once, and the client
polls ``retrieve_future`` for the result (the SDK's contract: ``tinker/lib/api_future_impl.py``).

The work runs on the service's own threads (:mod:`echo2.service.turns`); a poll waits for its
result at most ``wait_s`` (a long-poll, so a client learns of a result as soon as it exists
without polling in a loop) and is then told to try again. A result is kept ``keep_s`` after it
was made, and a client that asks for a request id the service never made, or one it has
forgotten, gets 410 from the route: the SDK then sends its original request again, which the
turns recognise by ``(model_id, seq_id)`` and answer with the same request id (applied once).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

ErrorCategory = Literal["user", "server", "unknown"]


@dataclass
class Outcome:
    """A finished request: its result, or why it failed (``user``: the request was wrong and
    sending it again will not help; ``server``: the service failed at it)."""

    result: Any = None
    error: str | None = None
    category: ErrorCategory = "server"
    finished_at: float = field(default_factory=time.monotonic)


class Futures:
    """Request ids and their outcomes, waited for from the event loop, resolved from any thread."""

    def __init__(self, keep_s: float = 3600.0) -> None:
        self.keep_s = keep_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]] = {}
        self._done: dict[str, Outcome] = {}
        self._owners: dict[str, str | None] = {}
        """Request id -> the tenant that may read its outcome (None: the service's own work, which
        only a caller naming no tenant reads)."""

    def create(self, owner: str | None = None) -> str:
        """A new request id, pending until :meth:`resolve` or :meth:`fail`, whose outcome only
        ``owner`` reads (:meth:`wait`)."""
        with self._lock:
            request_id = f"req-{next(self._ids)}"
            self._pending[request_id] = []
            self._owners[request_id] = owner
            return request_id

    def resolve(self, request_id: str, result: Any) -> None:
        self._finish(request_id, Outcome(result=result))

    def fail(self, request_id: str, error: str, category: ErrorCategory = "server") -> None:
        self._finish(request_id, Outcome(error=error, category=category))

    def _finish(self, request_id: str, outcome: Outcome) -> None:
        with self._lock:
            waiters = self._pending.pop(request_id, None)
            if waiters is None:
                return  # finished already (a request failed by a timeout and then done): the first word stands
            self._done[request_id] = outcome
            self._forget_old(outcome.finished_at)
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(_set_once, waiter, outcome)

    def _forget_old(self, now: float) -> None:
        """Results older than ``keep_s`` (the dict keeps insertion order: the oldest come first)."""
        while self._done:
            oldest = next(iter(self._done))
            if now - self._done[oldest].finished_at <= self.keep_s:
                return
            del self._done[oldest]
            self._owners.pop(oldest, None)

    def known(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._pending or request_id in self._done

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    async def wait(self, request_id: str, wait_s: float, owner: str | None = None) -> Outcome | None:
        """The outcome of ``request_id`` once it exists, or None after ``wait_s`` (try again).
        KeyError: the service does not know (or no longer keeps) that request, or it is not
        ``owner``'s (the same answer: no oracle of another tenant's requests)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._owners.get(request_id, owner) != owner:  # another tenant's, or the service's own work
                raise KeyError(request_id)
            if request_id in self._done:
                return self._done[request_id]
            if request_id not in self._pending:
                raise KeyError(request_id)
            waiter = loop.create_future()
            self._pending[request_id].append((loop, waiter))
        try:
            return await asyncio.wait_for(waiter, timeout=wait_s)
        except asyncio.TimeoutError:
            with self._lock:
                waiters = self._pending.get(request_id, [])
                if (loop, waiter) in waiters:
                    waiters.remove((loop, waiter))
            return None


def _set_once(waiter: asyncio.Future, outcome: Outcome) -> None:
    if not waiter.done():
        waiter.set_result(outcome)
