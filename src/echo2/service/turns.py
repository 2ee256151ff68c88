"""Each training client's requests run in ``seq_id`` order, each exactly once.

The SDK numbers a training client's requests (``seq_id``: forward-backward chunks, optimizer
steps, saves and loads share one counter, its ``create_model`` being 0) and may send them
concurrently, and it re-sends a request whose answer it did not get for up to five minutes
(``tinker/lib/internal_client_holder.py``). A server that ran requests as they arrived could run
an ``optim_step`` before the ``forward_backward`` it follows, or apply a re-sent ``optim_step``
twice (SkyRL#2035). Here a request runs only once every lower ``seq_id`` of its model has been
queued, and a ``(model_id, seq_id)`` seen before is answered with the request id it was given
then: a retry is applied once and its client polls the first one's result. A request that
reuses a ``(model_id, seq_id)`` with another body (its ``fingerprint``, a hash of what it
asked) is refused (:class:`ConflictingRetry`, 409) rather than answered with the first's result.

All requests run on one thread, in queue order: every training client shares the one base model
(its adapter is switched in for its own requests), so they could not run side by side anyway.
A request that waits for a lower ``seq_id`` that never comes fails after ``gap_timeout_s``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from echo2.service.futures import Futures

log = logging.getLogger("echo2.service")


class RequestError(Exception):
    """The request was wrong (its client's fault: sending it again will not help); the message says why."""


class ConflictingRetry(RequestError):
    """A request numbered as one seen before but with another body: answered 409, never applied
    (its first's result was not what it asked for)."""


class Turns:
    """The service's work queue: models' requests in ``seq_id`` order, once each, on one thread."""

    def __init__(self, futures: Futures, gap_timeout_s: float = 300.0, name: str = "echo2-service-turns") -> None:
        self.futures, self.gap_timeout_s = futures, gap_timeout_s
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._seen: dict[tuple[str, int], tuple[str, str | None]] = {}
        """(model id, seq_id) -> its request id and fingerprint."""
        self._held: dict[str, dict[int, tuple[str, Callable[[], Any], float]]] = {}
        self._queue: queue.Queue[tuple[str, Callable[[], Any]] | None] = queue.Queue()
        self.busy_s = 0.0
        """Seconds the work thread has spent running requests (the training service's share of the time)."""
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def submit(self, model_id: str, seq_id: int | None, work: Callable[[], Any], fingerprint: str | None = None,
               owner: str | None = None) -> str:
        """The request id of ``work`` as request ``seq_id`` of ``model_id``: a new one, queued now
        or once its turn comes, or the one a request of that ``(model_id, seq_id)`` and the same
        ``fingerprint`` got before (:class:`ConflictingRetry` for another fingerprint). ``seq_id``
        None (a client that does not number its requests) queues it as it comes. ``owner``: the
        tenant whose future it is (:meth:`Futures.create`)."""
        with self._lock:
            if seq_id is None:
                request_id = self.futures.create(owner)
                self._queue.put((request_id, work))
                return request_id
            if (model_id, seq_id) in self._seen:
                request_id, first = self._seen[(model_id, seq_id)]
                if first is not None and fingerprint is not None and first != fingerprint:
                    raise ConflictingRetry(f"seq_id {seq_id} of {model_id} was sent before with another body: "
                                           f"a retry must repeat its request exactly")
                return request_id
            expected = self._next.setdefault(model_id, 0)
            if seq_id < expected:
                raise RequestError(f"seq_id {seq_id} of {model_id} is behind its turns (the next is {expected}) "
                                   f"and was never seen: it cannot be run in order")
            request_id = self.futures.create(owner)
            self._seen[(model_id, seq_id)] = (request_id, fingerprint)
            self._held.setdefault(model_id, {})[seq_id] = (request_id, work, time.monotonic())
            self._release(model_id)
            return request_id

    def _release(self, model_id: str) -> None:
        """Queue the held requests of ``model_id`` whose turn has come (under the lock)."""
        held = self._held.get(model_id, {})
        while self._next[model_id] in held:
            request_id, work, _ = held.pop(self._next[model_id])
            self._queue.put((request_id, work))
            self._next[model_id] += 1

    def forget(self, model_id: str) -> None:
        """A released model's turns: its held requests fail, its seen ids are dropped."""
        with self._lock:
            held = self._held.pop(model_id, {})
            self._next.pop(model_id, None)
            for key in [key for key in self._seen if key[0] == model_id]:
                del self._seen[key]
        for request_id, _, _ in held.values():
            self.futures.fail(request_id, f"{model_id} was released before this request's turn", "user")

    def expire_gaps(self, now: float | None = None) -> int:
        """Fail the requests that have waited ``gap_timeout_s`` for a lower ``seq_id``; how many."""
        now = time.monotonic() if now is None else now
        failed: list[tuple[str, str]] = []
        with self._lock:
            for model_id, held in self._held.items():
                for seq_id, (request_id, _, arrived) in list(held.items()):
                    if now - arrived > self.gap_timeout_s:
                        del held[seq_id]
                        failed.append((request_id, f"seq_id {seq_id} of {model_id} waited {now - arrived:.0f}s for "
                                                   f"seq_id {self._next[model_id]}, which never came"))
        for request_id, why in failed:
            self.futures.fail(request_id, why, "user")
        return len(failed)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            request_id, work = item
            started = time.perf_counter()
            try:
                result = work()
            except RequestError as error:
                self.futures.fail(request_id, str(error), "user")
            except Exception as error:  # a request the service failed at: say so to its client, keep serving
                log.exception("request %s failed", request_id)
                self.futures.fail(request_id, f"{type(error).__name__}: {error}", "server")
            else:
                self.futures.resolve(request_id, result)
            finally:
                self.busy_s += time.perf_counter() - started
