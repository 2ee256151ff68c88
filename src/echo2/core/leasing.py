"""The answer to a lease request: one function the coordinator (under its lock, in wall time) and
the simulator (in simulated time) both call, so that a simulated worker is granted, held back,
told to refresh or parked exactly when a live one would be.

The order of the questions is the rule: a finished run stops everyone; a worker the activation
left out, or one parked for letting leases expire (:mod:`~echo2.core.shares`), is ``parked``;
then sampling requests (a training service's clients, an agent's calls: :mod:`~echo2.core.sample_queue`),
served first come, first served and ahead of the task's prompts: ``refresh`` when those waiting
need newer weights than the worker holds, else ``granted`` (one request for a worker on
probation, as many as it asks for otherwise); then, where the run leases a task's prompts at all,
the staleness window (:meth:`~echo2.core.pacing.PacingLedger.grantable`): ``wait`` while it
is full, ``refresh`` when the worker's weights are too old for the next slot; last the worker's
share of the window: ``wait`` while it holds its share already (its leases still being
generated or submitted), else ``granted`` with the lease's size (lent slots for a worker on
probation). ``wait`` and ``parked`` are answers that
change with time (a submission, a step, the parking's end): the coordinator holds such a request
open until then (its long-poll), the simulator queues it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from echo2.core.pacing import PacingLedger
from echo2.core.shares import Holder, SharePolicy, deadline_s, lease_size, on_probation

Status = Literal["granted", "wait", "refresh", "parked", "stop"]

Requests = Literal["none", "servable", "newer"]
"""The sampling requests waiting, as a worker at a version sees them: none, one it can serve, or
only requests that need newer weights than it holds (:meth:`~echo2.core.sample_queue.SampleQueue.servable`)."""

ASK_AHEAD_AT = 0.1
"""A lease request's round trip, as a fraction of generating a lease, above which an async worker
asks for its next lease while it generates one (:func:`worth_asking_ahead`)."""


@dataclass(frozen=True)
class LeaseAnswer:
    status: Status
    size: int = 0
    """Groups to grant (``granted`` only)."""
    lent: bool = False
    """The slots are lent: they count against the window once their group arrives (a worker on probation)."""
    deadline_s: float = 0.0
    """Seconds until the lease expires (``granted`` only; :func:`~echo2.core.shares.deadline_s`)."""
    kind: str = "prompt"
    """What the lease carries (:data:`echo2.core.books.WorkKind`): a task's prompts or sampling requests."""

    @property
    def final(self) -> bool:
        """Nothing but this answer will change until the worker asks again (``wait`` and
        ``parked`` may turn into a grant while the request is held open)."""
        return self.status not in ("wait", "parked")


def answer_lease(ledger: PacingLedger[Any, Any] | None, policy: SharePolicy, holder: Holder, *, worker_version: int,
                 requested: int, held: int, active: bool, others_live: bool, now: float,
                 lease_timeout_s: float, group_s: float | None, others_proven: bool,
                 finished: bool = False, untrained: int = 0, requests: Requests = "none") -> LeaseAnswer:
    """What a worker at ``worker_version`` asking for ``requested`` groups, holding ``held``
    in-flight slots, is answered at ``now``; ``ledger``: the task's prompts (None: the run leases
    none, a training service's fleet); ``requests``: the sampling requests waiting, as this worker
    sees them; ``active``: the activation keeps it working;
    ``others_live``: other active workers could take the work; ``untrained``: the holder's groups
    submitted and not trained yet, while a proven worker is at work; ``others_proven``: another
    worker at work has delivered (probation applies only then; both in
    :func:`~echo2.core.shares.lease_size`); ``lease_timeout_s`` and ``group_s`` (the expected
    seconds per group, :func:`~echo2.core.shares.group_seconds`) give the lease's deadline."""
    if finished:
        return LeaseAnswer("stop")
    if not active or now < holder.parked_until:
        return LeaseAnswer("parked")
    if requests != "none":
        if requests == "newer":
            return LeaseAnswer("refresh")
        probation = on_probation(policy, holder, others_proven)
        return LeaseAnswer("granted", 1 if probation else requested, kind="sample",
                           deadline_s=deadline_s(lease_timeout_s, probation, holder, group_s))
    if ledger is None:
        return LeaseAnswer("wait")
    status = ledger.grantable(worker_version)
    if status != "granted":
        return LeaseAnswer(status)
    window = (ledger.staleness + 1) * ledger.groups_per_step
    size = lease_size(policy, requested, held, window, others_live, holder, untrained, others_proven=others_proven)
    if not size:
        return LeaseAnswer("wait")
    probation = on_probation(policy, holder, others_proven)
    return LeaseAnswer("granted", size, lent=probation,
                       deadline_s=deadline_s(lease_timeout_s, probation, holder, group_s))


def worth_asking_ahead(round_trip_s: float | None, generate_s: float | None) -> bool:
    """Whether an async worker whose lease requests take ``round_trip_s`` and whose leases take
    ``generate_s`` to generate should ask for the next lease while it generates one (the live
    worker, :mod:`echo2.rollout.lease_ahead`, and the simulated one both ask here).

    It pays when the round trip would otherwise idle the worker: in the network lab's
    kernel-shaped links a request took 0.18 s against 0.10 s of generation (docs/wan.md). It
    costs where round trips are short against leases: the lease asked ahead is generated later
    at the version it was granted for, so its groups are older when they arrive (more dropped as
    stale), and a worker that dies loses two leases, not one; in the simulated fleets, with leases
    of tens of seconds, asking ahead always had made runs about 2% slower. So: only when the
    round trip exceeds :data:`ASK_AHEAD_AT` of a lease (unknown before the first lease: no)."""
    if round_trip_s is None or generate_s is None:
        return False
    return round_trip_s > ASK_AHEAD_AT * generate_s
