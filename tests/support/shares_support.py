"""A share policy and a lease holder for the window-share tests."""

from __future__ import annotations

from dataclasses import dataclass

from echo2.core.shares import SharePolicy

POLICY = SharePolicy(groups_per_lease=8, window_share=0.5)


@dataclass
class Holder:
    unfulfilled: int = 0
    parked_until: float = 0.0
    proven: bool = True
    groups_delivered: int = 0

