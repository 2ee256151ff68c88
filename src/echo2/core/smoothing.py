"""Moving averages of measured times: one weight for every average a decision reads (the
learner's step time and dissemination time that activation plans with, a worker's lease round
trip and generation time), the live roles' and the simulator's alike."""

from __future__ import annotations

#: Weight of the newest value in every moving average.
EMA_WEIGHT = 0.2
#: A new value counts at most this multiple of the average it joins.
MAX_RISE = 4.0


def ema(previous: float | None, value: float, weight: float) -> float:
    """Exponential moving average: ``value`` itself first, then ``(1 - weight) * previous + weight *
    value``, the value taken at most :data:`MAX_RISE` times ``previous``.

    Why the bound: one outlier must not outweigh the history. A single fetch stalled 145 s behind a
    trickling relay, joining a dissemination time of ~2 s, had made it 31 s: activation then judged
    the worker too slow to keep and parked it for the rest of the run. Bounded, that sample moves
    the average by at most ``weight * (MAX_RISE - 1)`` of itself (1.6x at the weights here), while a
    lasting rise still shows within a few values (each may be 4x the last average). Falls are not
    bounded: a value below the average can pull it down at most ``weight`` of the way."""
    if previous is None:
        return value
    if previous > 0:
        value = min(value, MAX_RISE * previous)
    return (1 - weight) * previous + weight * value
