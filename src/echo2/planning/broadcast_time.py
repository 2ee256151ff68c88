"""Expected dissemination time of one version, for planning (the model behind bench/broadcast.py).

* star: the learner sends the payload ``M`` to each of ``N`` workers over its uplink ``B_L``:
  ``N * M / B_L``;
* pipelined chain (:mod:`echo2.broadcast.topology`): every byte leaves the learner once and
  flows down the chain at the slowest uplink on it, plus one chunk time per hop to fill the
  pipeline: ``M / min(B_L, B_relays) + (N - 1) * chunk / min(...)``.

Latency per request is ignored (it is small against a chunk time for the chunk sizes used).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from echo2.units import MIB


def broadcast_seconds(payload_bytes: float, learner_upload: float, relay_uploads: Sequence[float], mode: str,
                      chunk_bytes: float = MIB) -> float:
    """Seconds until the last of ``len(relay_uploads)`` workers holds a version (bytes and bytes/s)."""
    receivers = len(relay_uploads)
    if receivers == 0:
        return 0.0
    if learner_upload <= 0:
        return math.inf
    if mode == "star":
        return receivers * payload_bytes / learner_upload
    if mode != "pipelined":
        raise ValueError(f"unknown broadcast mode {mode!r}")
    # the last worker in the chain relays to nobody, so its uplink does not matter
    rate = min([learner_upload, *sorted(relay_uploads, reverse=True)[: receivers - 1]])
    if rate <= 0:
        return math.inf
    return (payload_bytes + (receivers - 1) * min(chunk_bytes, payload_bytes)) / rate
