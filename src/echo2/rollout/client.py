"""HTTP client of the coordinator API, with timeouts and retry-with-backoff on every call.

A worker that cannot reach the coordinator says so (URL, what it was doing, the error) and
retries with exponential backoff (capped at :data:`MAX_RETRY_DELAY_S`) until ``give_up_after_s``,
by default for ever: a worker started by hand outlives an outage of any length; a 4xx is never retried: it carries
the coordinator's reason and is raised as :class:`RequestRefused`. Neither is a coordinator that
fails TLS verification (``verify``: see :mod:`echo2.net.tls`): :class:`CoordinatorUntrusted` at once.
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import TypeVar

import httpx
from pydantic import BaseModel

from echo2.net.guard import broadcast_credential
from echo2.net.tls import verification_failure
from echo2.protocol import (
    AUTH_HEADER,
    Heartbeat,
    HeartbeatResponse,
    LeaseFailure,
    LeaseRequest,
    LeaseResponse,
    RegisterRequest,
    RegisterResponse,
    RespondRequest,
    RespondResponse,
    SubmitRequest,
    SubmitResponse,
    VersionInfo,
)

log = logging.getLogger("echo2.worker")
#: The longest wait between two tries: a worker notices a healed link within about this long.
MAX_RETRY_DELAY_S = 10.0
#: A heartbeat's whole time limit: it is answered at once, so a silent link (a partition that drops
#: packets on a kept-alive connection, where no connect timeout applies) is noticed this soon
#: rather than after the 30 s every other call allows.
HEARTBEAT_TIMEOUT_S = 8.0
Reply = TypeVar("Reply", bound=BaseModel)


class CoordinatorUnreachable(ConnectionError):
    """The coordinator did not answer within the retry budget."""


class CoordinatorUntrusted(CoordinatorUnreachable):
    """The coordinator's certificate failed verification (wrong pin, unknown CA, wrong host): not
    retried, since no credential must be sent to it."""


class RequestRefused(RuntimeError):
    """The coordinator answered with a 4xx; ``detail`` is its reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"coordinator refused the request ({status}): {detail}")
        self.status, self.detail = status, detail


class SessionLost(RequestRefused):
    """The coordinator no longer knows this worker's session: it restarted (a resumed learner) or
    declared the worker dead. The worker registers again."""


class CoordinatorClient:
    def __init__(self, url: str, run_token: str, *, timeout_s: float = 30.0, give_up_after_s: float | None = 120.0,
                 verify: ssl.SSLContext | bool = True) -> None:
        """``give_up_after_s``: how long a call retries an unreachable coordinator (None: for ever).
        ``verify``: how an ``https://`` coordinator's certificate is checked (:func:`echo2.net.tls.client_context`)."""
        self.url = url.rstrip("/")
        self.run_token = run_token
        self.session_token: str | None = None
        self.broadcast_token = broadcast_credential(run_token)
        """What this worker presents to relays and the learner's chunk server (and accepts on its
        own relay): the one the coordinator handed out at registration, derived until then."""
        self.give_up_after_s = give_up_after_s
        self.http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout_s, connect=5.0), verify=verify)

    def close(self) -> None:
        self.http.close()

    def _request(self, method: str, path: str, what: str, body: BaseModel | None = None,
                 read_timeout_s: float | None = None) -> httpx.Response:
        token = self.session_token or self.run_token
        started, delay = time.monotonic(), 0.5
        while True:
            try:
                response = self.http.request(
                    method,
                    path,
                    content=body.model_dump_json() if body is not None else None,
                    headers={AUTH_HEADER: token, "content-type": "application/json"},
                    timeout=read_timeout_s or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as error:
                if (failure := verification_failure(error)) is not None:
                    raise CoordinatorUntrusted(f"the coordinator at {self.url} failed TLS verification ({what}): "
                                               f"{failure}") from None
                problem = f"cannot reach the coordinator at {self.url} ({what}): {type(error).__name__}: {error}"
            else:
                if response.status_code < 400:
                    return response
                detail = _detail(response)
                if response.status_code in (401, 410) and token == self.session_token:
                    raise SessionLost(response.status_code, detail)
                if response.status_code == 429:  # rate-limited: wait as long as it says, within the budget
                    delay = max(delay, _retry_after(response))
                elif response.status_code < 500:
                    raise RequestRefused(response.status_code, detail)
                problem = f"coordinator at {self.url} failed ({what}): {response.status_code} {detail}"
            elapsed = time.monotonic() - started
            if self.give_up_after_s is not None and elapsed + delay > self.give_up_after_s:
                raise CoordinatorUnreachable(f"{problem}; gave up after {elapsed:.0f}s")
            log.warning("%s; retrying in %.1fs (%s)", problem, delay,
                        f"for {elapsed:.0f}s now; until it answers" if self.give_up_after_s is None
                        else f"for {elapsed:.0f}s of at most {self.give_up_after_s:.0f}s")
            time.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_S)

    def _call(self, path: str, what: str, body: BaseModel, reply: type[Reply], read_timeout_s: float | None = None
              ) -> Reply:
        return reply.model_validate_json(self._request("POST", path, what, body, read_timeout_s).content)

    def register(self, request: RegisterRequest) -> RegisterResponse:
        self.session_token = None  # registering (again) is done with the run token
        response = self._call("/v1/register", "registering", request, RegisterResponse)
        self.session_token, self.broadcast_token = response.session_token, response.broadcast_token
        return response

    def heartbeat(self, beat: Heartbeat) -> HeartbeatResponse:
        return self._call("/v1/heartbeat", "sending a heartbeat", beat, HeartbeatResponse,
                          read_timeout_s=HEARTBEAT_TIMEOUT_S)

    def lease(self, request: LeaseRequest, wait_s: float) -> LeaseResponse:
        return self._call("/v1/lease", "asking for a lease", request, LeaseResponse, read_timeout_s=wait_s + 30.0)

    def respond(self, request: RespondRequest) -> RespondResponse:
        return self._call("/v1/respond", f"asking the environment (lease {request.lease_id})", request, RespondResponse)

    def submit(self, request: SubmitRequest) -> SubmitResponse:
        return self._call("/v1/submit", f"submitting lease {request.lease_id}", request, SubmitResponse)

    def fail(self, failure: LeaseFailure) -> None:
        """Hand a lease back that could not be carried out, saying why."""
        self._request("POST", "/v1/fail", f"handing back lease {failure.lease_id}", failure)

    def deregister(self) -> None:
        """Leave the run (one attempt, short timeout: used while shutting down)."""
        if self.session_token is None:
            return
        try:
            self.http.post("/v1/deregister", headers={AUTH_HEADER: self.session_token}, timeout=5.0)
        except httpx.HTTPError as error:
            log.warning("could not deregister from %s: %s", self.url, error)

    def version(self) -> VersionInfo:
        return VersionInfo.model_validate_json(self._request("GET", "/v1/version", "asking for the version").content)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]


def _retry_after(response: httpx.Response) -> float:
    """Seconds a 429 asks the client to wait (``Retry-After``; 1 s when missing or not a number)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0
