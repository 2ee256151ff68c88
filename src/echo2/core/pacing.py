"""The pacing ledger: group slots, prompts in flight, the replay buffer — books without a clock.

The live coordinator (``coordinator/state.py``, in wall time, under its lock) and the simulator
(``simulation/engine.py``, in simulated time) keep their books in this one class, so every grant
and every batch of a simulated run is decided by the very code that decides it in a real one.
The rules themselves are :mod:`echo2.core.staleness`; this module applies them to a running tally:

* **grant** — slots are numbered in grant order; a worker at version ``w`` gets slots while the
  useful ones stay inside the lease window ``(S + v + 1) * B`` and the next slot is one its
  weights are still fresh for (else it is told to ``refresh``). A slot's prompt comes from the
  re-queue first, then from the task's stream (``draw``);
* **admit** — a submitted group enters the buffer tagged with its version and slot;
* **take** — the learner's batch for step ``t``: groups too old for ``t`` are dropped (their
  prompts re-queued, their slots stop counting); then the ``B`` oldest fresh groups (by version,
  then slot) are handed out, so that nothing still usable ages out while newer groups train;
* **release** — slots lost before their group was trained (an expired lease, a quarantined
  worker's groups, a group filtered out of the batch): they stop counting against the window,
  and their prompts are re-queued, or used up when the group was seen and filtered.
* **lend** — a slot granted to a worker on probation (:func:`echo2.core.shares.on_probation`:
  one that has not delivered yet, or let a lease expire) does not count against the window until
  its group arrives. A hoarder's one slot would otherwise hold the window one slot short for up
  to ``lease_timeout_s`` (in the attack bench that cut the learner's steps/s by about 40% while
  it was held, and each new identity gets a trial lease). If the group does arrive it counts
  from then on: at most one group a worker on probation beyond the window, trained or dropped
  as stale like any other.

Type parameters: ``P`` is what a slot carries (the live coordinator: the task's example; the
simulator: nothing), ``G`` what a submitted group is (the live coordinator: a :class:`Group`).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from echo2.core import staleness as rule

P = TypeVar("P")
G = TypeVar("G")

Grantable = Literal["granted", "wait", "refresh"]


class PacingLedger(Generic[P, G]):
    def __init__(self, staleness: int, groups_per_step: int) -> None:
        self.staleness, self.groups_per_step = staleness, groups_per_step
        self.version = 0
        """The learner's newest published version."""
        self.useful_slots = 0
        """Slots granted and not lost: they count against the lease window."""
        self.next_slot = 0
        self.requeued: deque[P] = deque()
        """Prompts whose slots were lost, handed out again before new ones are drawn."""
        self.in_flight: dict[int, P] = {}
        """Granted slots whose group has not been submitted yet."""
        self.lent: set[int] = set()
        """In-flight slots that do not count against the window (granted to a worker on probation)."""
        self._buffer: list[tuple[int, int, P, G]] = []
        """Submitted groups as a heap of (version, slot, prompt, group): the learner's order."""
        self.dropped_stale = 0
        self.requeued_total = 0

    # ------------------------------------------------------------------ workers' side
    def grantable(self, worker_version: int) -> Grantable:
        """Can a slot go to a worker at ``worker_version`` now: 'granted', 'wait' (window full) or
        'refresh' (its weights are too old for the next slot)."""
        if self.useful_slots >= rule.lease_window(self.version, self.staleness, self.groups_per_step):
            return "wait"
        if not rule.worker_can_take(self.useful_slots, worker_version, self.staleness, self.groups_per_step):
            return "refresh"
        return "granted"

    def grant(self, worker_version: int, max_groups: int, draw: Callable[[], P], lent: bool = False) -> dict[int, P]:
        """Up to ``max_groups`` slots for a worker at ``worker_version`` (none if not grantable),
        each with its prompt; ``lent``: they count against the window only once their group arrives."""
        granted: dict[int, P] = {}
        while len(granted) < max_groups and self.grantable(worker_version) == "granted":
            prompt = self.requeued.popleft() if self.requeued else draw()
            granted[self.next_slot] = self.in_flight[self.next_slot] = prompt
            if lent:
                self.lent.add(self.next_slot)
            else:
                self.useful_slots += 1
            self.next_slot += 1
        return granted

    def admit(self, slot: int, version: int, group: G) -> None:
        """The group of an in-flight ``slot``, generated by policy ``version``, enters the buffer
        (a lent slot now counts against the window)."""
        if slot in self.lent:
            self.lent.discard(slot)
            self.useful_slots += 1
        heapq.heappush(self._buffer, (version, slot, self.in_flight.pop(slot), group))

    def release(self, slots: Iterable[int], front: bool = False) -> None:
        """In-flight ``slots`` were lost (their lease expired or was withdrawn): re-queue their
        prompts, at the ``front`` to keep a lost lease's prompts first in line."""
        slots = list(slots)
        prompts = [self.in_flight.pop(slot) for slot in slots]
        lent = self.lent.intersection(slots)
        self.lent -= lent
        self._lose(prompts, front, counted=len(prompts) - len(lent))

    # ------------------------------------------------------------------ learner's side
    def take(self, step: int, count: int, on_stale: Callable[[G], None] = lambda group: None) -> list[G] | None:
        """The ``count`` oldest groups fresh for ``step``, or None while fewer are buffered
        (stale groups are dropped either way, each passed to ``on_stale``)."""
        stale = []
        while self._buffer and not rule.is_fresh(step, self._buffer[0][0], self.staleness):
            _, _, prompt, group = heapq.heappop(self._buffer)
            stale.append(prompt)
            on_stale(group)
        self.dropped_stale += len(stale)
        self._lose(stale)
        if len(self._buffer) < count:
            return None
        return [heapq.heappop(self._buffer)[3] for _ in range(count)]

    def buffered(self, matches: Callable[[G], bool]) -> int:
        """How many buffered groups ``matches`` selects (one worker's, not trained yet)."""
        return sum(1 for entry in self._buffer if matches(entry[3]))

    def discard_taken(self, prompts: list[P], requeue: bool) -> None:
        """Groups the learner took but did not train on: their slots stop counting; their prompts
        are re-queued (``requeue``: a quarantined worker's) or used up (filtered after being seen)."""
        if requeue:
            self._lose(prompts)
        else:
            self.useful_slots -= len(prompts)

    def evict(self, matches: Callable[[G], bool]) -> list[G]:
        """Remove the buffered groups ``matches`` selects (a quarantined worker's); their prompts are re-queued."""
        kept = [entry for entry in self._buffer if not matches(entry[3])]
        evicted = [entry for entry in self._buffer if matches(entry[3])]
        heapq.heapify(kept)
        self._buffer = kept
        self._lose([entry[2] for entry in sorted(evicted)])
        return [entry[3] for entry in evicted]

    def _lose(self, prompts: list[P], front: bool = False, counted: int | None = None) -> None:
        """Re-queue lost slots' ``prompts``; ``counted`` of them (all by default) counted against the window."""
        self.useful_slots -= len(prompts) if counted is None else counted
        self.requeued_total += len(prompts)
        if front:
            self.requeued.extendleft(reversed(prompts))
        else:
            self.requeued.extend(prompts)

    # ------------------------------------------------------------------ inspection and resume
    def __len__(self) -> int:
        return len(self._buffer)

    def snapshot(self, encode_prompt: Callable[[P], Any], encode_group: Callable[[G], Any]) -> dict[str, Any]:
        """Plain data to resume from: in-flight slots count as lost (their prompts re-queued)."""
        in_flight = [self.in_flight[slot] for slot in sorted(self.in_flight)]
        return {
            "requeued": [encode_prompt(p) for p in [*self.requeued, *in_flight]],
            "buffer": [[version, slot, encode_prompt(prompt), encode_group(group)]
                       for version, slot, prompt, group in sorted(self._buffer, key=lambda e: (e[0], e[1]))],
            "useful_slots": self.useful_slots - (len(in_flight) - len(self.lent)),
            "next_slot": self.next_slot,
            "dropped_stale": self.dropped_stale,
            "requeued_total": self.requeued_total + len(in_flight),
        }

    def restore(self, data: dict[str, Any], decode_prompt: Callable[[Any], P], decode_group: Callable[[Any], G]) -> None:
        """Put a fresh ledger back where :meth:`snapshot` left one."""
        self.requeued.extend(decode_prompt(p) for p in data["requeued"])
        self._buffer = [(version, slot, decode_prompt(prompt), decode_group(group))
                        for version, slot, prompt, group in data["buffer"]]
        heapq.heapify(self._buffer)
        self.useful_slots, self.next_slot = data["useful_slots"], data["next_slot"]
        self.dropped_stale, self.requeued_total = data["dropped_stale"], data["requeued_total"]
