"""Clients that take their time or come in crowds: the request head's and body's deadlines
(slow loris) and the per-address registration limit (a registration flood)."""

from __future__ import annotations

import pytest

from echo2.net.ratelimit import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_allows_a_burst_then_the_refill_rate():
    clock = FakeClock()
    limiter = RateLimiter(burst=3, per_minute=60, clock=clock)  # one a second after the burst
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == pytest.approx(1.0)  # refused, with the wait until the next token
    assert limiter.take("b") is None  # another address has its own bucket
    clock.now += 0.5
    assert limiter.take("a") == pytest.approx(0.5)  # a refusal spends nothing
    clock.now += 0.5
    assert limiter.take("a") is None
    assert limiter.take("a") is not None
    clock.now += 3600  # an idle address refills to the burst, no more
    assert [limiter.take("a") for _ in range(4)].count(None) == 3


def test_rate_limiter_forgets_the_least_recently_seen_address():
    limiter = RateLimiter(burst=1, per_minute=1, max_keys=2, clock=FakeClock())
    assert limiter.take("a") is None and limiter.take("b") is None
    assert limiter.take("a") is not None  # "a" is now the most recent
    assert limiter.take("c") is None  # evicts "b", not "a"
    assert limiter.take("a") is not None
    assert limiter.take("b") is None  # forgotten: a full bucket again
    with pytest.raises(ValueError, match="burst"):
        RateLimiter(burst=0, per_minute=1)
