"""Units and the one moving average: every module converts sizes, rates and averages through here.

Links are stated in Mbit/s (as providers sell them) and computed in bytes/s; sizes on the wire
are stated in MiB. ``None`` means an unlimited (uncapped) link everywhere.
"""

from __future__ import annotations

import math

#: Bytes per MiB (chunk sizes, payloads).
MIB = 1024 * 1024
#: Bytes per GB (model sizes in scenarios are decimal, as vendors state them).
GB = 1e9


def mbps_to_bytes_per_s(mbps: float | None) -> float | None:
    """Mbit/s to bytes/s; None (uncapped) stays None."""
    return None if mbps is None else mbps * 1e6 / 8


def link_bytes_per_s(mbps: float | None) -> float:
    """Mbit/s to bytes/s for arithmetic: None (uncapped) becomes infinity."""
    return math.inf if mbps is None else mbps * 1e6 / 8
