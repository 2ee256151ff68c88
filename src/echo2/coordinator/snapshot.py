"""The coordinator's books as plain data, for a learner that crashes and resumes.

What must survive a learner crash for no prompt to be lost and none trained twice:

* the **data cursor**: how many examples were drawn from the task's deterministic training
  stream (a resumed run skips exactly that many);
* prompts handed out but not yet trained on: those **re-queued**, those in the **replay
  buffer** (accepted groups, kept with their completions and version tags), and those of the
  leases still **in flight** at the snapshot (re-queued on restore, as if the leases expired);
* the pacing counters (useful slots, next slot) and the reliability counters.

Workers are not part of it: after a restart they register again (see
:class:`echo2.rollout.worker.RolloutWorker`), and versions are republished from the checkpoint.
Anything that happened after the snapshot is forgotten, which is safe: the cursor rewinds, so
the prompts drawn since are drawn again, and the groups trained since are trained only by the
run that continues.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from echo2.coordinator.cursor import CountingStream, DrawnExample
from echo2.coordinator.records import Group
from echo2.coordinator.state import CoordinatorState
from echo2.tasks import Example


def take(state: CoordinatorState) -> dict[str, Any]:
    """Snapshot of ``state`` (consistent: taken under its lock)."""
    with state.cond:
        in_flight = [example for lease in state.leases.values() if lease.state == "active"
                     for example in lease.examples.values()]
        return {
            "examples_drawn": state.examples.drawn,
            "requeued": [asdict(e) for e in [*state.requeued, *in_flight]],
            "buffer": [asdict(g) for g in state.buffer],
            "useful_slots": state.useful_slots - len(in_flight),
            "next_slot": state.next_slot,
            "leases_in_flight": sum(lease.state == "active" for lease in state.leases.values()),
            "trained_draws": sorted(state.trained_draws),
            "counters": dict(state.counters),
            "dropped": dict(state.dropped),
            "rejected": dict(state.rejected),
        }


def restore(state: CoordinatorState, snapshot: dict[str, Any], examples: Iterator[Example]) -> None:
    """Put a fresh ``state`` (no workers, no leases) back where :func:`take` left it;
    ``examples`` is the task's training stream from its start."""
    with state.cond:
        state.examples = CountingStream(examples, skip=snapshot["examples_drawn"])
        state.requeued.extend(DrawnExample(**e) for e in snapshot["requeued"])
        state.buffer = [Group(**{**g, "example": DrawnExample(**g["example"])}) for g in snapshot["buffer"]]
        state.useful_slots, state.next_slot = snapshot["useful_slots"], snapshot["next_slot"]
        state.trained_draws = set(snapshot["trained_draws"])
        state.counters.update(snapshot["counters"])
        state.counters["leases_lost_in_restart"] += snapshot["leases_in_flight"]
        state.counters["learner_restarts"] += 1
        state.dropped.update(snapshot["dropped"])
        state.rejected.update(snapshot["rejected"])
        state.cond.notify_all()
