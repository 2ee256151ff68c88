"""Work sources: the kinds of work a run's fleet does beside (or instead of) a task's prompts.

A task's prompts are leased by the staleness window (:mod:`echo2.core.pacing`); every other kind
of work reaches the fleet as sampling requests on the books' queue (:class:`~echo2.core.sample_queue.SampleWork`,
first come, first served, each naming the weights it wants): a training service's clients'
(``echo2 serve``), an agent run's calls (:mod:`echo2.gateway`), or one of a user's own. A source
queues its requests with its name on them (``SampleWork.source``) and the coordinator hands back
to it, under its lock, what became of each: the checked results of a lease (:meth:`WorkSource.results`)
or a request refused for good (:meth:`WorkSource.refused`, a poison pill). The coordinator also
asks every source to reap what it holds past its time, with the silent workers, and to report its
counts, in its own units, beside the books' (the reliability report, each step's metrics).

AReaL runs an agent as one more workflow over the same engine and staleness controller; here a
kind of work is one more source over the same books, leases and audits: a new one is one class
with these four members, added to the coordinator
(:meth:`~echo2.coordinator.state.CoordinatorState.add_source`) by the part that builds it over
the coordinator, before the server starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from echo2.core.sample_queue import SampleWork
from echo2.protocol import SampleResult

if TYPE_CHECKING:
    from echo2.coordinator.records import Lease


class WorkSource(Protocol):
    """One kind of sampling work (see the module). Every method is called holding the coordinator's
    lock: each hands its outcome on, and blocks on nothing."""

    name: str
    """What its requests carry as ``SampleWork.source``, and its section of the reports."""

    def results(self, worker_id: str, lease: Lease, results: list[SampleResult]) -> None:
        """The checked results of its requests in ``lease`` (``lease.slots[result.slot]`` is the
        request), sampled by ``worker_id``."""

    def refused(self, work: SampleWork, why: str) -> None:
        """``work`` is refused for good (its leases failed on two workers), and why."""

    def reap(self) -> None:
        """Drop what it holds past its time (an agent's episodes past their deadline)."""

    def report(self) -> dict[str, float]:
        """Its counts, in its own units (episodes, calls, requests), for the reports."""
