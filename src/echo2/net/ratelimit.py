"""Per-address token buckets: how many registrations one address may make, and how fast.

A registration is cheap to send and not free to hold (a worker record, a place in the relay plan
until its heartbeats stop). Anyone with the run token may register, so the coordinator lets
each client address register ``burst`` times at once and then ``per_minute`` times a minute;
past that it answers 429 with ``Retry-After``, which echo2's workers honour. The clock is passed
in, so the rule is tested without sleeping.
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
        now = self.clock()
        tokens, updated = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - updated) * self.rate_per_s)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return None if allowed else (1.0 - tokens) / self.rate_per_s
