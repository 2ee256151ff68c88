"""Is a worker's advertised relay reachable, and is it that worker's? Asked before anyone is told
to fetch there.

A worker names its relay's URL when it registers, but behind NAT (most cheap GPUs) nothing can
connect to it, and an address like ``127.0.0.1`` means a different machine to each peer: a remote
worker once told to fetch every version first from ``127.0.0.1`` (the learner's host's local
worker) made 248 failed attempts in four minutes. So the coordinator asks the relay who it is
(``GET /v1/relay/identity`` with the broadcast credential) from its own host, a few times over
its first seconds, and counts the relay only once it answers with the worker's own id. Until then,
and for good if it never does, the worker is a leaf of the broadcast plan: it still leases,
fetches and submits (all its connections are outbound), fed by relays that did answer.

An address that means "this host" (loopback, link-local, unspecified) is *host-scoped*: even
when it answers, only workers that reached the coordinator from the same address as its worker
(the same host) may be sent there (:func:`host_scoped`, the plan's ``site``).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

import httpx

from echo2.broadcast.relay import IDENTITY_PATH, PREFIX
from echo2.protocol import AUTH_HEADER

log = logging.getLogger("echo2.coordinator")

#: Seconds before each try: a relay may start answering as itself only once its worker has its id.
CHECK_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
CHECK_TIMEOUT_S = 3.0
#: Seconds after a re-check of a relay reported silent before another (:meth:`RelayChecker.recheck`).
RECHECK_EVERY_S = 30.0

#: (worker id, reachable, why) once a check has an answer.
Verdict = Callable[[str, bool, str], None]


def host_scoped(url: str) -> bool:
    """Does ``url``'s host mean "this machine" (loopback, link-local, unspecified, ``localhost``)?"""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a DNS name: as global as the resolver makes it
        return False
    return address.is_loopback or address.is_link_local or address.is_unspecified


class RelayChecker:
    """Checks each advertised relay in a thread of its own; ``verdict`` gets the outcome."""

    def __init__(self, credential: str, verdict: Verdict, delays_s: Sequence[float] = CHECK_DELAYS_S,
                 timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.credential, self.verdict = credential, verdict
        self.delays_s, self.timeout_s = tuple(delays_s), timeout_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._rechecking: set[str] = set()
        self._rechecked: dict[str, float] = {}

    def check(self, worker_id: str, url: str) -> None:
        threading.Thread(target=self._check, args=(worker_id, url), daemon=True, name=f"relay-check-{worker_id}").start()

    def recheck(self, worker_id: str, url: str, version: int, budget_s: float, verdict: Verdict) -> None:
        """A peer found the relay at ``url`` silent: ask it for ``version``'s first chunk, in a
        thread of its own; ``verdict(worker_id, answered, why)``: answered (the chunk, whole) within
        ``budget_s``, or not (silence, a refusal, an error: a relay that cannot serve a version it
        holds is no source either; the bench's silent relay answered the first check with a 500).
        One check of a relay at a time, and none within :data:`RECHECK_EVERY_S` of its last: a
        swarm of reports costs one request a while."""
        now = time.monotonic()
        with self._lock:
            self._rechecked = {seen: at for seen, at in self._rechecked.items() if now - at < RECHECK_EVERY_S}
            if url in self._rechecking or url in self._rechecked:
                return
            self._rechecking.add(url)
        threading.Thread(target=self._recheck, args=(worker_id, url, version, budget_s, verdict), daemon=True,
                         name=f"relay-recheck-{worker_id}").start()

    def close(self) -> None:
        self._stop.set()

    def _check(self, worker_id: str, url: str) -> None:
        why = "no try made"
        # the relay's certificate is not checked here (peers check it with their own pins or CA):
        # the answer only places the worker in the plan, and every chunk is verified by its hash
        with httpx.Client(base_url=url, timeout=self.timeout_s, verify=False) as http:
            for delay in self.delays_s:
                if self._stop.wait(delay):
                    return
                try:
                    response = http.get(IDENTITY_PATH, headers={AUTH_HEADER: self.credential})
                except httpx.HTTPError as error:
                    why = f"{type(error).__name__}: {error}"
                    continue
                answered = _identity(response)
                if answered == worker_id:
                    self.verdict(worker_id, True, f"answered as {worker_id}")
                    return
                why = f"answered {response.status_code} as {answered!r}, not as {worker_id!r}"
        self.verdict(worker_id, False, why)


    def _recheck(self, worker_id: str, url: str, version: int, budget_s: float, verdict: Verdict) -> None:
        started, answered, why = time.monotonic(), False, "no answer"
        try:
            with httpx.Client(base_url=url, timeout=httpx.Timeout(budget_s, connect=min(5.0, budget_s)),
                              verify=False) as http, \
                    http.stream("GET", f"{PREFIX}/{version}/chunks/0", headers={AUTH_HEADER: self.credential}) as response:
                received = 0
                for piece in response.iter_bytes():
                    received += len(piece)
                    if time.monotonic() - started > budget_s:
                        raise httpx.ReadTimeout(f"{received} bytes in {budget_s:g}s")
                answered = response.status_code == 200 and received > 0
                why = f"answered {response.status_code} with {received} bytes"
        except httpx.HTTPError as error:
            why = f"{type(error).__name__}: {error}"
        finally:
            with self._lock:
                self._rechecking.discard(url)
                self._rechecked[url] = time.monotonic()
        if not self._stop.is_set():
            verdict(worker_id, answered, f"{why} in {time.monotonic() - started:.1f}s")


def _identity(response: httpx.Response) -> str | None:
    try:
        return response.json().get("worker_id") if response.status_code == 200 else None
    except ValueError:
        return None
