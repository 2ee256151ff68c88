"""A node's upload cap: every byte it sends, across all concurrent responses, shares one rate.

This is a token bucket without burst whose tokens are handed out first come, first served by
*reservation*: a sender reserves the link for its whole body (``schedule``), after everything
reserved before it, then sends each slice as soon as the slices before it are paid for (a burst
of one slice; the body as a whole still takes exactly ``size / rate``). Two properties follow,
and both matter for a pipelined broadcast:

* the total rate is exact for any number of concurrent senders, threads or coroutines alike
  (reservations are made under one lock; a late wake-up is caught up on, never accumulated);
* bodies go out in order instead of interleaved: a relay asked for chunks *i* and *i+1* at once
  finishes *i* at full speed first, so the next node in the chain can forward it one chunk-time
  later (with fair interleaving every hop would add two chunk-times of pipeline fill).

A reservation abandoned midway (the receiver went away) gives its unused tail back when it is
the last one queued. ``latency_s`` is extra per-response delay (to emulate a slow link's RTT);
it is applied by the caller before the response starts, it does not use up bandwidth.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

#: Size of the slices a body is sent in; each is paced on its own.
SLICE_BYTES = 64 * 1024


class Throttle:
    def __init__(self, rate_bytes_per_s: float | None = None, *, latency_s: float = 0.0) -> None:
        if rate_bytes_per_s is not None and rate_bytes_per_s <= 0:
            raise ValueError(f"rate_bytes_per_s must be > 0 or None (unlimited), not {rate_bytes_per_s}")
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, not {latency_s}")
        self.rate = rate_bytes_per_s
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._next_free = 0.0  # monotonic time at which everything reserved so far has gone out
        self._sent_bytes = 0
        self._sending_seconds = 0.0

    def measured_rate(self, min_bytes: int = 1 << 20) -> float | None:
        """Achieved upload rate over every complete body sent so far (bytes per second of sending),
        once at least ``min_bytes`` went out: what the relay planner orders workers by."""
        with self._lock:
            if self._sent_bytes < min_bytes or self._sending_seconds <= 0:
                return None
            return self._sent_bytes / self._sending_seconds

    def _sent(self, nbytes: int, seconds: float) -> None:
        with self._lock:
            self._sent_bytes += nbytes
            self._sending_seconds += seconds

    @property
    def unlimited(self) -> bool:
        return self.rate is None

    def schedule(self, nbytes: int) -> float:
        """Reserve the link for ``nbytes`` after all earlier reservations; returns the reservation's start."""
        with self._lock:
            if self.rate is None:
                return time.monotonic()
            start = max(time.monotonic(), self._next_free)
            self._next_free = start + nbytes / self.rate
            return start

    def release(self, reserved_end: float) -> None:
        """Give back the unused tail of an abandoned reservation, if nothing was queued after it."""
        with self._lock:
            if self.rate is not None and self._next_free == reserved_end:
                self._next_free = min(reserved_end, time.monotonic())

    def acquire(self, nbytes: int) -> None:
        """Block until ``nbytes`` may be considered sent (for callers that write synchronously)."""
        start = self.schedule(nbytes)
        if self.rate is not None:
            time.sleep(max(0.0, start + nbytes / self.rate - time.monotonic()))

    async def paced(self, data: bytes, slice_bytes: int = SLICE_BYTES) -> AsyncIterator[bytes]:
        """Yield ``data`` in slices, each once this body's reservation has paid for the ones before it."""
        view = memoryview(data)
        if self.rate is None:
            began = self.schedule(len(data))
            for offset in range(0, len(data), slice_bytes):
                yield bytes(view[offset:offset + slice_bytes])
            self._sent(len(data), time.monotonic() - began)
            return
        began = time.monotonic()
        start = self.schedule(len(data))
        end, sent = start + len(data) / self.rate, 0
        try:
            for offset in range(0, len(data), slice_bytes):
                piece = view[offset:offset + slice_bytes]
                due = start + offset / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield bytes(piece)
                sent += len(piece)
            self._sent(sent, max(time.monotonic() - max(start, began), 1e-6))
        finally:
            if sent < len(data):
                self.release(end)
