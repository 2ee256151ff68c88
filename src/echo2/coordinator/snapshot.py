"""The coordinator's books as plain data, for a learner that crashes and resumes.

What must survive a learner crash for no prompt to be lost and none trained twice:

* the **data cursor**: how many examples were drawn from the task's deterministic training
  stream (a resumed run skips exactly that many);
* prompts handed out but not yet trained on: those **re-queued**, those in the **replay
  buffer** (accepted groups, kept with their completions and version tags), and those of the
  leases still **in flight** at the snapshot (re-queued on restore, as if the leases expired);
* the pacing counters (useful slots, next slot) and the reliability counters;
* the run clock's smoothed step and dissemination times, which activation plans with.

Workers are not part of it: after a restart they register again (see
:class:`echo2.rollout.worker.RolloutWorker`), and versions are republished from the checkpoint.
Anything that happened after the snapshot is forgotten, which is safe: the cursor rewinds, so
the prompts drawn since are drawn again, and the groups trained since are trained only by the
run that continues.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from echo2.coordinator.cursor import CountingStream, DrawnExample, TrainedDraws
from echo2.exchange import Group
from echo2.tasks import Example

if TYPE_CHECKING:
    from echo2.coordinator.books import CoordinatorBooks


def _group(data: dict[str, Any]) -> Group:
    return Group(**{**data, "example": DrawnExample(**data["example"])})


def take(state: CoordinatorBooks) -> dict[str, Any]:
    """Snapshot of ``state`` (call under its lock)."""
    return {
        "examples_drawn": state.examples.drawn,
        "ledger": state.books.ledger.snapshot(asdict, asdict),
        "leases_in_flight": len(state.books.active_leases()),
        "trained_draws": sorted(state.trained.draws),
        "counters": state.books.counters.as_dict(),
        "rejected": dict(state.books.rejected),
        "clock": state.books.clock.state(),
    }


def restore(state: CoordinatorBooks, snapshot: dict[str, Any], examples: Iterator[Example]) -> None:
    """Put a fresh ``state`` (no workers, no leases) back where :func:`take` left it (call under its
    lock); ``examples`` is the task's training stream from its start."""
    state.examples = CountingStream(examples, skip=snapshot["examples_drawn"])
    books = state.books
    books.ledger.restore(snapshot["ledger"], lambda e: DrawnExample(**e), _group)
    state.trained = TrainedDraws(snapshot["trained_draws"])
    books.counters.add(snapshot["counters"])
    books.counters.leases_lost_in_restart += snapshot["leases_in_flight"]
    books.counters.learner_restarts += 1
    books.rejected.update(snapshot["rejected"])
    if "clock" in snapshot:  # checkpoints written before the coordinator kept the clock lack it
        books.clock.restore(snapshot["clock"])
