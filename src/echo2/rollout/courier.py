"""A worker's submissions, sent on a thread of their own.

While a lease's results cross the worker's uplink, the worker already asks for its next lease,
which the coordinator grants as soon as those results are in (:mod:`echo2.core.leasing`): a lease
costs a slow or distant link one round trip, not two, and the queue of a busy uplink delays no
generation. A lease's groups that finish while its other rows still decode go out at once
(:meth:`Courier.post`, on the same thread, in order: the decoding never waits for the link); its
final submission (:meth:`Courier.send`) first waits for the submissions of the lease before, so a
worker never runs more than one lease ahead of its link.

The log line of each answer is the worker's own ledger (``bench/chaos.py`` and
``bench/partitions.py`` check it against what the learner trained).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from echo2.protocol import SubmitRequest
from echo2.rollout.client import CoordinatorClient, RequestRefused, SessionLost

log = logging.getLogger("echo2.worker")


class Courier:
    def __init__(self, client: CoordinatorClient, session_lost: Callable[[], None]) -> None:
        self.client, self.session_lost = client, session_lost
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="echo2-submit")
        self._in_flight: list[tuple[str, Future[None]]] = []
        """(lease id, submission) not yet waited for, in the order sent."""

    def post(self, request: SubmitRequest) -> None:
        """Hand over a part of a lease (groups done while its other rows decode) without waiting."""
        self._in_flight.append((request.lease_id, self._thread.submit(self._submit, request, part=True)))

    def send(self, request: SubmitRequest) -> None:
        """Hand over a lease's final submission once the submissions of the leases before it are
        answered; raises what one of those could not handle (the coordinator unreachable past the
        client's retry budget)."""
        self.settle(but=request.lease_id)
        self._in_flight.append((request.lease_id, self._thread.submit(self._submit, request)))

    def settle(self, but: str | None = None) -> None:
        """Wait for the submissions in flight, but those of lease ``but``."""
        waiting = [future for lease_id, future in self._in_flight if lease_id != but]
        self._in_flight = [(lease_id, future) for lease_id, future in self._in_flight if lease_id == but]
        for future in waiting:
            future.result()

    def close(self) -> None:
        """Let the results in hand go out (the worker leaves after them)."""
        self._thread.shutdown(wait=True)

    def _submit(self, request: SubmitRequest, part: bool = False) -> None:
        try:
            reply = self.client.submit(request)
        except SessionLost as error:
            log.warning("the coordinator forgot this worker while it submitted (%s)", error.detail)
            self.session_lost()
            return
        except RequestRefused as error:
            # e.g. the lease expired while it was generated: its prompts went to another worker
            log.warning("submission of lease %s refused: %s", request.lease_id, error.detail)
            return
        # A duplicate is this very submission sent again by the client's retry after its answer was
        # lost (a partition, a timeout): the coordinator had kept the first copy.
        kept = len(request.groups) if reply.duplicate else reply.accepted
        log.info("lease %s: %d groups accepted%s%s", request.lease_id, kept, " (a part)" if part else "",
                 " (its first copy, whose answer was lost)" if reply.duplicate else "")
