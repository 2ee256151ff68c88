"""Moving averages of measured times: one weight for every average a decision reads (the
learner's step time and dissemination time that activation plans with, a worker's lease round
trip and generation time), the live roles' and the simulator's alike."""

from __future__ import annotations

#: Weight of the newest value in every moving average.
EMA_WEIGHT = 0.2


def ema(previous: float | None, value: float, weight: float) -> float:
    """Exponential moving average: ``value`` itself first, then ``(1 - weight) * previous + weight * value``."""
    return value if previous is None else (1 - weight) * previous + weight * value
