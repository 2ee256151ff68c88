"""Expected dissemination time of one version, for planning (the model behind bench/broadcast.py).

* star: the learner sends the payload ``M`` to each of ``N`` workers over its uplink ``B_L``, its
  throttle serving chunk requests first come first served while each fetch keeps ``IN_FLIGHT``
  chunks asked: the ``k``-th worker holds it at ``(N * (M - w) + k * w) / B_L`` with
  ``w = min(M, IN_FLIGHT * chunk)``, the last at ``N * M / B_L``;
* pipelined chain (:mod:`echo2.broadcast.topology`): every byte leaves the learner once and
  flows down the chain at the slowest uplink on it, plus one chunk time per hop to fill the
  pipeline: the ``k``-th worker at ``(M + (k - 1) * chunk) / min(B_L, B_relays above it)``.

Latency per request is ignored (it is small against a chunk time for the chunk sizes used).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from echo2.units import MIB

#: Chunk requests a worker's fetch keeps open at once (``echo2.broadcast.downloader.IN_FLIGHT``).
IN_FLIGHT = 2


def arrival_seconds(payload_bytes: float, learner_upload: float, relay_uploads: Sequence[float], mode: str,
                    chunk_bytes: float = MIB) -> list[float]:
    """Seconds until each of ``len(relay_uploads)`` workers holds a version, in order (bytes and bytes/s)."""
    receivers = len(relay_uploads)
    if receivers == 0:
        return []
    if learner_upload <= 0:
        return [math.inf] * receivers
    chunk = min(chunk_bytes, payload_bytes)
    if mode == "star":
        window = min(payload_bytes, IN_FLIGHT * chunk)
        return [(receivers * (payload_bytes - window) + k * window) / learner_upload for k in range(1, receivers + 1)]
    if mode != "pipelined":
        raise ValueError(f"unknown broadcast mode {mode!r}")
    # the fastest uplinks relay first (topology.plan_tree); the last worker relays to nobody
    relays = sorted(relay_uploads, reverse=True)
    arrivals, rate = [], learner_upload
    for k in range(receivers):
        if k > 0:
            rate = min(rate, relays[k - 1])
        arrivals.append(math.inf if rate <= 0 else (payload_bytes + k * chunk) / rate)
    return arrivals


def broadcast_seconds(payload_bytes: float, learner_upload: float, relay_uploads: Sequence[float], mode: str,
                      chunk_bytes: float = MIB) -> float:
    """Seconds until the last of ``len(relay_uploads)`` workers holds a version (bytes and bytes/s)."""
    return max(arrival_seconds(payload_bytes, learner_upload, relay_uploads, mode, chunk_bytes), default=0.0)


def staggered_broadcast_s(arrivals: Sequence[float], rates: Sequence[float], rollouts: float) -> float:
    """The dissemination time to charge a batch when workers receive a version at different times
    and each starts generating on its own arrival (``sync``: nobody generates with the old one).

    The batch of ``rollouts`` is done at the ``t`` solving ``sum_i rate_i * max(0, t - a_i) = rollouts``;
    returned as ``t - rollouts / sum_i rate_i``, so that ``T_bcast + R / sum(mu)`` stays the
    generation phase's length: the last arrival when all arrive together, less when the early
    ones make a head start (a star's first-come-first-served uplink)."""
    if len(arrivals) != len(rates) or not arrivals:
        raise ValueError("one arrival time per worker rate, at least one")
    total = sum(rates)
    if total <= 0:
        return max(arrivals)
    started_rate = done = 0.0
    order = sorted(zip(arrivals, rates, strict=True))
    for (arrival, rate), following in zip(order, [a for a, _ in order[1:]] + [math.inf], strict=True):
        started_rate += rate
        if started_rate > 0 and done + started_rate * (following - arrival) >= rollouts:
            return arrival + (rollouts - done) / started_rate - rollouts / total
        done += started_rate * (following - arrival)
    raise AssertionError("unreachable: the last segment is unbounded")
