"""The learner's side of the coordinator's books: taking a batch, and giving back the groups of
it that are not trained after all (filtered, unauditable, or from a quarantined worker)."""

from __future__ import annotations

import time

from echo2.coordinator.books import CoordinatorBooks
from echo2.coordinator.membership import Membership
from echo2.exchange import GiveBack, Group, NoBatch

#: How long the learner waits for a batch before the dashboard says so: waits of a second or two
#: between steps are a starved learner's normal, not news.
WAIT_WORTH_SAYING_S = 5.0


class LearnerDesk:
    """The learner's batches from ``parts``; ``members`` reaps while the learner waits and
    quarantines the workers of groups given back as suspect. A worker delivers when a group of
    its is trained (:func:`echo2.core.shares.delivered`): the groups taken for a step and not
    given back are trained by the time the learner publishes the step's version."""

    def __init__(self, parts: CoordinatorBooks, members: Membership) -> None:
        self.parts, self.members = parts, members
        self.waiting_since: tuple[int, float] | None = None
        """(step, ``time.monotonic()``) while the learner waits for that step's batch."""

    def take_batch(self, step: int, timeout_s: float, count: int | None = None) -> list[Group]:
        """Block until ``count`` (default ``groups_per_step``) groups fresh for ``step`` are
        buffered; return them (oldest versions first; stale ones dropped, see :mod:`echo2.core.pacing`)."""
        count = self.parts.groups_per_step if count is None else count
        deadline = time.monotonic() + timeout_s
        with self.parts.cond:
            while (batch := self.parts.books.take(step, count, time.monotonic())) is None:
                if self.waiting_since is None or self.waiting_since[0] != step:
                    self.waiting_since = (step, time.monotonic())
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NoBatch(
                        f"waited {timeout_s:.0f}s for {count} rollout groups for step {step} "
                        f"(have {len(self.parts.books.ledger)}; {len(self.parts.registry.live())} live workers)", self.data_wait())
                self.parts.cond.wait(min(remaining, 0.5))
                self.members.reap()
            self.waiting_since = None
            for group in batch:
                self.parts.books.counters.groups_trained_twice += not self.parts.trained.add(group.example)
            return batch

    def data_wait(self) -> str | None:
        """Why the learner is not training, once it has waited :data:`WAIT_WORTH_SAYING_S` for a
        batch (None before): the progress line and the dashboard say it, so that a run cut off from
        its workers waits visibly."""
        with self.parts.cond:
            if self.waiting_since is None or time.monotonic() - self.waiting_since[1] < WAIT_WORTH_SAYING_S:
                return None
            step, since = self.waiting_since
            silent = sum(1 for r in self.parts.registry.records() if not r.alive and not r.left and not r.quarantined)
            return (f"waiting {time.monotonic() - since:.0f}s for step {step}'s data: {len(self.parts.books.ledger)} groups "
                    f"buffered (a step takes {self.parts.groups_per_step}), {len(self.parts.registry.live())} live workers"
                    + (f", {silent} declared dead (silent)" if silent else ""))

    def give_back(self, groups: list[Group], reason: GiveBack, why: str = "", worker_id: str | None = None) -> None:
        """Groups the learner took but does not train on; their slots stop counting against the
        pacing window, so that replacements are leased at once.

        * ``filtered``: DAPO's dynamic sampling dropped them (all rewards equal); their prompts are
          used up, not re-queued;
        * ``unauditable``: their version was lost in a restart; never trained unaudited, their
          prompts re-queued for a fresh sample, counted in the report;
        * ``suspect``: their workers failed verification (``why``): each is quarantined
          (:meth:`quarantine`), these groups discarded with its others, their prompts re-queued;
          ``worker_id``: the one worker found lying (an agent's group has a worker per call), else
          every group's worker.
        """
        with self.parts.cond:
            given = {id(group) for group in groups}
            self.parts.books.in_training = [g for g in self.parts.books.in_training if id(g) not in given]
            if reason == "filtered":
                self.parts.drop_taken(groups, requeue=False)
                self.parts.books.counters.groups_filtered += len(groups)
            elif reason == "unauditable":
                self.parts.drop_taken(groups, requeue=True)
                self.parts.books.counters.groups_discarded_unauditable += len(groups)
            else:
                for suspect in [worker_id] if worker_id else dict.fromkeys(group.worker_id for group in groups):
                    self.members.quarantine(suspect, why, taken=[g for g in groups if suspect in g.workers()])
