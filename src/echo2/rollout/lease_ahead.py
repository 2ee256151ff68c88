"""A worker's lease requests, and the next lease asked for while the current one generates.

A lease request's round trip is time the worker does not generate. On a link whose queue fills
with weight transfers it is long: in the network lab's kernel-shaped links (docs/wan.md) a
worker waited a median 0.18 s between two leases that took 0.10 s to generate. So an async
worker whose round trips are long against its leases asks for its next lease as soon as it
starts generating one, and finds the answer waiting when it is done; when to ask ahead is the
protocol core's decision (:meth:`echo2.core.worker_protocol.WorkerProtocol.ask_ahead`), and
:data:`echo2.core.shares.LEASES_IN_HAND` lets the coordinator grant it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from echo2.protocol import LeaseRequest, LeaseResponse
from echo2.rollout.client import CoordinatorClient

Answered = tuple[LeaseResponse, float]
"""A lease request's answer and its round trip in seconds."""

LEASE_WAIT_S = 5.0
"""Seconds a lease request may be held open (``coordinator.lease_wait_s`` decides), on top of the
client's read timeout."""


class LeaseAhead:
    def __init__(self, client: CoordinatorClient, pause: Callable[[float], object] = time.sleep) -> None:
        """``pause(seconds)``: how to wait out a ``retry_after_s`` (the worker's stop event's ``wait``)."""
        self.client, self.pause = client, pause
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="echo2-lease-ahead")
        self._pending: Future[Answered] | None = None

    def lease(self, request: LeaseRequest) -> Answered:
        """Ask now and wait for the answer; one the coordinator gave at once with a
        ``retry_after_s`` (rather than holding it open) is returned after that long, as a long-poll
        would have been, so the next request does not follow at once."""
        started = time.perf_counter()
        reply = self.client.lease(request, wait_s=LEASE_WAIT_S)
        if reply.retry_after_s:
            self.pause(min(reply.retry_after_s, LEASE_WAIT_S))
        return reply, time.perf_counter() - started

    def ask(self, request: LeaseRequest) -> None:
        """Send ``request`` now; its answer is :meth:`take`'s."""
        self._pending = self._thread.submit(self.lease, request)

    def take(self) -> Answered | None:
        """The answer to the request asked ahead (waiting for it; raising what the request raised),
        or None when none was asked."""
        pending, self._pending = self._pending, None
        return None if pending is None else pending.result()

    def drop(self) -> None:
        """Forget the request asked ahead: it belongs to a session the coordinator forgot (the lease
        it may have granted went with that session)."""
        self._pending = None

    def close(self) -> None:
        """Leave without waiting for an answer (a lease granted meanwhile goes back with the
        worker's deregistration)."""
        self._thread.shutdown(wait=False, cancel_futures=True)
