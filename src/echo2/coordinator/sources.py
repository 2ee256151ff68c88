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
with these four members, handed to the coordinator when it is built.
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


class Sink(Protocol):
    """Where a work source's outcomes are handled: :meth:`WorkSource.results` and :meth:`WorkSource.refused`."""

    def results(self, worker_id: str, lease: Lease, results: list[SampleResult]) -> None: ...

    def refused(self, work: SampleWork, why: str) -> None: ...


class DeskSource:
    """A work source named ``name`` whose outcomes go to a desk built after the coordinator it
    queues on (a training service's sampling desk needs the coordinator first): ``desk`` is set
    before any worker can submit. It reaps nothing and reports nothing of its own: such a desk
    keeps its own time limits and counts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.desk: Sink | None = None

    def _wired(self) -> Sink:
        assert self.desk is not None, f"work source {self.name!r}: its desk is set before any worker can submit"
        return self.desk

    def results(self, worker_id: str, lease: Lease, results: list[SampleResult]) -> None:
        self._wired().results(worker_id, lease, results)

    def refused(self, work: SampleWork, why: str) -> None:
        self._wired().refused(work, why)

    def reap(self) -> None:
        pass

    def report(self) -> dict[str, float]:
        return {}
