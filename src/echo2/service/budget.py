"""What the training service holds for its clients, bounded: sessions and training clients per key
and in all, and a memory budget checked before a client is created.

Each training client holds its LoRA adapter with its gradients and AdamW moments on the service's
one base model, and each of its samplers a copy in the fleet's bundle and in the auditor. Nothing
bounded them: +17.5 MB of the service's memory per rank-64 client of the tiny model, linear up to
the OOM killer, which took every client's unsaved adapter with the service. A client is now
refused, naming the limit, when the service's resident memory and the new client's estimated
footprint would pass the budget (``service.memory_budget_gb``; by default 80% of the machine's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psutil

from echo2.service.turns import RequestError

#: The budget, when the config sets none: this share of the machine's memory.
DEFAULT_BUDGET_SHARE = 0.8
GB = 1024**3


@dataclass(frozen=True)
class ServiceLimits:
    """The most the service holds (``service.max_*``)."""

    sessions_per_key: int
    clients_per_key: int
    clients: int


class MemoryBudget:
    """``budget_gb`` (None: :data:`DEFAULT_BUDGET_SHARE` of the machine's memory) against this
    process's resident memory plus ``client_bytes()``, the footprint a new client is expected to
    add; ``resident()`` (this process's RSS by default) is given for tests."""

    def __init__(self, budget_gb: float | None, client_bytes: Callable[[], int],
                 resident: Callable[[], int] | None = None) -> None:
        total = psutil.virtual_memory().total
        self.budget_bytes = int(budget_gb * GB) if budget_gb is not None else int(DEFAULT_BUDGET_SHARE * total)
        self.client_bytes = client_bytes
        self.resident = resident or (lambda: psutil.Process().memory_info().rss)

    def admit(self) -> None:
        """Nothing when a new client fits; else the refusal naming the budget."""
        now, more = self.resident(), self.client_bytes()
        if now + more > self.budget_bytes:
            raise RequestError(f"the service is at its memory budget ({now / GB:.2f} GB resident, a new training "
                               f"client needs ~{more / 2**20:.0f} MB more, service.memory_budget_gb="
                               f"{self.budget_bytes / GB:.2f}): try again when a client is released")
