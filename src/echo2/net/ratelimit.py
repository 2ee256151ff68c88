"""Token buckets per key: how many registrations one address may make, how many requests and
heartbeats one worker may send, how many timeline events one worker may write, and how fast.

A registration is cheap to send and not free to hold (a worker record, a place in the relay plan
until its heartbeats stop). Anyone with the run token may register, so the coordinator lets
each client address register ``burst`` times at once and then ``per_minute`` times a minute;
past that it answers 429 with ``Retry-After``, which echo2's workers honour. A registered worker's
requests are budgeted the same way by its identity (a flood of heartbeats from one worker had
slowed the learner by half), its timeline events too (one worker had written 7.6 MB/s into
``timeline.jsonl``). Not thread-safe: callers hold a lock (or, in the HTTP guard, the event loop's
one thread calls it). The clock is passed in, so the rule is tested without sleeping.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """Token bucket per key: ``burst`` tokens, refilled at ``per_minute / 60`` a second.
    At most ``max_keys`` buckets are kept (the least recently used is forgotten: a fresh,
    full bucket for an address not seen for a long time is what it would have refilled to)."""

    def __init__(self, burst: int, per_minute: float, *, max_keys: int = 65536,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or per_minute <= 0:
            raise ValueError(f"a rate limit needs burst >= 1 and per_minute > 0, got {burst}, {per_minute}")
        self.burst, self.rate_per_s, self.max_keys, self.clock = burst, per_minute / 60.0, max_keys, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, updated at)

    def take(self, key: str) -> float | None:
        """Spend one token of ``key``'s bucket: None when allowed, else seconds until one is free."""
        tokens = self._refilled(key)
        allowed = tokens >= 1.0
        self._store(key, tokens - 1.0 if allowed else tokens)
        return None if allowed else (1.0 - tokens) / self.rate_per_s

    def grant(self, key: str, wanted: int) -> int:
        """Spend up to ``wanted`` whole tokens of ``key``'s bucket; how many were spent."""
        tokens = self._refilled(key)
        granted = max(0, min(wanted, int(tokens)))
        self._store(key, tokens - granted)
        return granted

    def _refilled(self, key: str) -> float:
        now = self.clock()
        tokens, updated = self._buckets.pop(key, (float(self.burst), now))
        self._now = now
        return min(float(self.burst), tokens + (now - updated) * self.rate_per_s)

    def _store(self, key: str, tokens: float) -> None:
        self._buckets[key] = (tokens, self._now)
        if len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
