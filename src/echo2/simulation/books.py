"""The coordinator's books in simulated form: group slots, pacing, the buffer, the learner's batch.

Every decision goes through :mod:`echo2.staleness`, exactly as ``coordinator/state.py`` makes it:
the lease window ``(S + v + 1) * B`` of useful slots, ``worker_can_take`` for the slot a worker
would fill, ``is_fresh`` for the learner's batch; the batch takes the oldest versions first
(then by slot); stale groups are dropped and their slots stop counting, as do the slots of
expired leases. No clock here: the engine calls in at simulated times.
"""

from __future__ import annotations

import heapq
from collections import Counter

from echo2 import staleness as rule


class Books:
    def __init__(self, staleness: int, groups_per_step: int) -> None:
        self.staleness = staleness
        self.groups_per_step = groups_per_step
        self.version = 0
        """The learner's newest published version."""
        self.useful_slots = 0
        self.next_slot = 0
        self.buffer: list[tuple[int, int]] = []
        """Submitted groups as a heap of (version, slot): the learner's order."""
        self.counters: Counter[str] = Counter()

    def grantable(self, worker_version: int) -> str:
        """'granted', 'wait' (window full) or 'refresh' (the worker's weights are too old for the slot)."""
        if self.useful_slots >= rule.lease_window(self.version, self.staleness, self.groups_per_step):
            return "wait"
        if not rule.worker_can_take(self.useful_slots, worker_version, self.staleness, self.groups_per_step):
            return "refresh"
        return "granted"

    def grant(self, worker_version: int, max_groups: int) -> list[int]:
        """Slots of a new lease for a worker at ``worker_version`` (call when :meth:`grantable` said so)."""
        slots = []
        while len(slots) < max_groups and self.grantable(worker_version) == "granted":
            slots.append(self.next_slot)
            self.next_slot += 1
            self.useful_slots += 1
        self.counters["leases_issued"] += 1
        return slots

    def submit(self, version: int, slots: list[int]) -> None:
        for slot in slots:
            heapq.heappush(self.buffer, (version, slot))
        self.counters["leases_completed"] += 1
        self.counters["groups_accepted"] += len(slots)

    def expire(self, slots: list[int]) -> None:
        """A lease lost (its worker died, or it ran past its deadline): its prompts are re-issued."""
        self.useful_slots -= len(slots)
        self.counters["leases_expired"] += 1
        self.counters["prompts_requeued"] += len(slots)

    def take_batch(self, step: int) -> tuple[list[int] | None, int]:
        """The versions of the ``B`` oldest fresh groups for ``step`` (None: not enough yet), and how
        many stale groups were dropped on the way."""
        dropped = 0
        while self.buffer and not rule.is_fresh(step, self.buffer[0][0], self.staleness):
            heapq.heappop(self.buffer)
            dropped += 1
        if dropped:
            self.useful_slots -= dropped
            self.counters["groups_dropped_stale"] += dropped
            self.counters["prompts_requeued"] += dropped
        if len(self.buffer) < self.groups_per_step:
            return None, dropped
        versions = [heapq.heappop(self.buffer)[0] for _ in range(self.groups_per_step)]
        self.counters["groups_trained"] += len(versions)
        return versions, dropped
