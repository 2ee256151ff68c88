"""A worker's submissions, sent on a thread of their own.

While a lease's results cross the worker's uplink, the worker already asks for its next lease,
which the coordinator grants as soon as those results are in (:mod:`echo2.core.leasing`): a lease
costs a slow or distant link one round trip, not two, and the queue of a busy uplink delays no
generation. One submission at a time: :meth:`Courier.send` first waits for the one before, so a
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
        self._in_flight: Future[None] | None = None

    def send(self, request: SubmitRequest) -> None:
        """Hand ``request`` over once the submission before it is answered; raises what that one
        could not handle (the coordinator unreachable past the client's retry budget)."""
        self.settle()
        self._in_flight = self._thread.submit(self._submit, request)

    def settle(self) -> None:
        """Wait for the submission in flight, if any."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def close(self) -> None:
        """Let the results in hand go out (the worker leaves after them)."""
        self._thread.shutdown(wait=True)

    def _submit(self, request: SubmitRequest) -> None:
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
        log.info("lease %s: %d groups accepted%s", request.lease_id, kept,
                 " (its first copy, whose answer was lost)" if reply.duplicate else "")
