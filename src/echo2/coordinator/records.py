"""What the coordinator keeps about workers, leases and accepted groups, and the submission limits.

Plain records; :mod:`echo2.coordinator.state` owns them and changes them under its lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from echo2.tasks import Example


@dataclass
class WorkerRecord:
    worker_id: str
    name: str
    session_token: str
    version: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    alive: bool = True
    groups: int = 0
    samples: int = 0
    tokens: int = 0
    generate_seconds: float = 0.0
    rejected: int = 0
    fetches: int = 0
    last_fetch_seconds: float = 0.0
    relay_url: str | None = None
    upload_bytes_per_s: float | None = None
    loaded_version: int = -1
    price_per_hour: float = 0.0
    worker_class: str = ""
    active: bool = True
    """False: parked by cost-aware activation (no leases)."""
    quarantined: bool = False
    """Its results failed verification: no more leases or submissions."""
    left: bool = False
    """Deregistered itself (preemption, SIGTERM)."""
    active_seconds: float = 0.0
    throughput: float | None = None
    """Moving average of measured rollouts/s (None until its first lease is submitted)."""


@dataclass
class Lease:
    lease_id: str
    worker_id: str
    version: int
    examples: dict[int, Example]
    deadline: float
    granted_at: float = field(default_factory=time.monotonic)
    state: str = "active"  # active | done | expired


@dataclass
class Group:
    """One prompt's G completions, as accepted from a worker."""

    slot: int
    example: Example
    version: int
    worker_id: str
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    rewards: list[float]


@dataclass
class Limits:
    """What a valid submission may contain."""

    group_size: int
    max_new_tokens: int
    vocab_size: int
    reward_range: tuple[float, float]
