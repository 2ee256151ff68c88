"""Sampling requests as lease work: the second kind of work the books lease, beside a task's prompts.

A training service's clients (``echo2 serve``) sample from adapters the service published: a
request can go to any worker that holds a version whose bundle carries its sampler (that version
or a newer one: the service keeps a sampler in every bundle while requests for it wait). Unlike a
task's prompts, requests are not paced by the staleness window — each names the weights it wants,
the client keeps its own staleness — so the queue is first come, first served, and a request whose
lease expires goes back to the front.

A request whose leases failed on :data:`POISON_AFTER` different workers (each handed its lease back
with the reason, :meth:`echo2.core.books.Books.failed`) is a poison pill: it is refused to its
client with that reason and never leased again, so that one client's request cannot take the
fleet down worker by worker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

POISON_AFTER = 2
"""Workers whose leases of one request failed, after which the request is refused, not re-issued."""


@dataclass(frozen=True)
class SampleWork:
    request_id: str
    min_version: int
    """The first version whose bundle holds the request's sampler."""
    rows: int
    """Completions asked for (its share of a lease: one request counts as one group)."""
    request: Any = None
    """What the lease hands the worker (opaque to the books)."""
    source: str = ""
    """The name of the work source that queued it: where its results go (:mod:`echo2.coordinator.sources`)."""


class SampleQueue:
    def __init__(self) -> None:
        self._waiting: deque[tuple[int, SampleWork]] = deque()
        self._next_slot = 0
        self._failed_on: dict[str, set[str]] = {}
        """Request id -> the workers whose leases of it failed (until it is answered, dropped or poisoned)."""

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, work: SampleWork) -> int:
        """Queue ``work``; its slot."""
        slot, self._next_slot = self._next_slot, self._next_slot + 1
        self._waiting.append((slot, work))
        return slot

    def servable(self, worker_version: int) -> bool:
        """Whether a worker holding ``worker_version`` can take a waiting request."""
        return any(work.min_version <= worker_version for _, work in self._waiting)

    def take(self, worker_version: int, most: int) -> dict[int, SampleWork]:
        """Up to ``most`` waiting requests a worker at ``worker_version`` can take, oldest first."""
        taken: dict[int, SampleWork] = {}
        for slot, work in list(self._waiting):
            if len(taken) == most:
                break
            if work.min_version <= worker_version:
                taken[slot] = work
                self._waiting.remove((slot, work))
        return taken

    def release(self, slots: dict[int, SampleWork]) -> None:
        """Requests of a lease that ended unsubmitted: first in line again."""
        self._waiting.extendleft(reversed(list(slots.items())))

    def failed(self, slots: dict[int, SampleWork], worker_id: str) -> list[SampleWork]:
        """Requests of a lease ``worker_id`` handed back failed: those that have now failed on
        :data:`POISON_AFTER` workers are returned (poisoned: never leased again), the others are
        first in line again."""
        poisoned, again = [], {}
        for slot, work in slots.items():
            failed_on = self._failed_on.setdefault(work.request_id, set())
            failed_on.add(worker_id)
            if len(failed_on) >= POISON_AFTER:
                poisoned.append(work)
                del self._failed_on[work.request_id]
            else:
                again[slot] = work
        self.release(again)
        return poisoned

    def settled(self, works: Iterable[SampleWork]) -> None:
        """``works`` were answered: their failures are forgotten."""
        for work in works:
            self._failed_on.pop(work.request_id, None)

    def add_front(self, works: list[SampleWork]) -> None:
        """Requests whose results were not returned (a failed audit): first in line again, on new slots."""
        slots = range(self._next_slot, self._next_slot + len(works))
        self._next_slot += len(works)
        self.release(dict(zip(slots, works)))

    def drop(self, request_ids: set[str]) -> int:
        """Forget waiting requests (their client is gone); how many."""
        for request_id in request_ids:
            self._failed_on.pop(request_id, None)
        kept = deque(item for item in self._waiting if item[1].request_id not in request_ids)
        dropped, self._waiting = len(self._waiting) - len(kept), kept
        return dropped
