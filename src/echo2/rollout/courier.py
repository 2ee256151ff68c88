"""A worker's submissions, sent on a thread of their own.

While a lease's results cross the worker's uplink, the worker already asks for its next lease,
which the coordinator grants as soon as those results are in (:mod:`echo2.core.leasing`): a lease
costs a slow or distant link one round trip, not two, and the queue of a busy uplink delays no
generation. A lease's groups that finish while its other rows still decode go out at once
(:meth:`Courier.post`); while a submission is on the wire, the next ones queue and go out together
as one (a lease's queued parts, and its final submission with them), so a link or a coordinator
slower than the decoding pays one round trip per wait, not one per group (a 0.45M-parameter model
decodes a group in ~5 ms, and its parts one by one took ~45 ms each on loopback). A lease's final
submission (:meth:`Courier.send`) first waits for the submissions of the leases before it, so a
worker never runs more than one lease ahead of its link.

The log line of each answer is the worker's own ledger (``bench/chaos.py`` and
``bench/partitions.py`` check it against what the learner trained).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

from echo2.protocol import SubmitRequest
from echo2.rollout.client import CoordinatorClient, RequestRefused, SessionLost

log = logging.getLogger("echo2.worker")


class Courier:
    def __init__(self, client: CoordinatorClient, session_lost: Callable[[], None]) -> None:
        self.client, self.session_lost = client, session_lost
        self._lock = threading.Condition()
        self._queue: list[tuple[SubmitRequest, bool]] = []
        """(submission, whether it is a part), in the order handed over, not yet on the wire."""
        self._outstanding: Counter[str] = Counter()
        """Submissions handed over and not yet answered, by lease id."""
        self._error: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="echo2-submit", daemon=True)
        self._thread.start()

    def post(self, request: SubmitRequest) -> None:
        """Hand over a part of a lease (groups done while its other rows decode) without waiting."""
        self._hand_over(request, part=True)

    def send(self, request: SubmitRequest) -> None:
        """Hand over a lease's final submission once the submissions of the leases before it are
        answered; raises what one of those could not handle (the coordinator unreachable past the
        client's retry budget)."""
        self.settle(but=request.lease_id)
        self._hand_over(request, part=False)

    def settle(self, but: str | None = None) -> None:
        """Wait until every submission handed over is answered, but those of lease ``but``."""
        with self._lock:
            self._lock.wait_for(lambda: self._error is not None
                                or not any(n for lease, n in self._outstanding.items() if lease != but))
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Let the results in hand go out (the worker leaves after them)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()

    def _hand_over(self, request: SubmitRequest, part: bool) -> None:
        with self._lock:
            self._queue.append((request, part))
            self._outstanding[request.lease_id] += 1
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return
                batch, self._queue = coalesced(self._queue), []
            for request, part, count in batch:
                try:
                    self._submit(request, part)
                except BaseException as error:  # noqa: BLE001 -- handed to the main thread at its next settle
                    with self._lock:
                        self._error = self._error or error
                finally:
                    with self._lock:
                        self._outstanding[request.lease_id] -= count
                        self._outstanding += Counter()  # drop the zeros
                        self._lock.notify_all()

    def _submit(self, request: SubmitRequest, part: bool) -> None:
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


def coalesced(queue: list[tuple[SubmitRequest, bool]]) -> list[tuple[SubmitRequest, bool, int]]:
    """``queue`` with each run of one lease's submissions merged into one: their groups together,
    their generation seconds summed, the last one's events; a part still, unless the run ends with
    the lease's final submission. Each with how many submissions it carries."""
    merged: list[tuple[SubmitRequest, bool, int]] = []
    for request, part in queue:
        if merged and merged[-1][1] and merged[-1][0].lease_id == request.lease_id:
            before, _, count = merged[-1]
            request = request.model_copy(update={
                "groups": [*before.groups, *request.groups],
                "generate_seconds": before.generate_seconds + request.generate_seconds})
            merged[-1] = (request, part, count + 1)
        else:
            merged.append((request, part, 1))
    return merged
