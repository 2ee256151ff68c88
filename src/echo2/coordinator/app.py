"""The coordinator's HTTP API (FastAPI). The learner never connects to a worker: workers pull.

Authentication: ``register`` needs the run token; it returns a per-worker session credential
that every later call presents (same header), so a worker can only act on its own leases, and
the run's broadcast credential, the only one the chunk routes (``/v1/broadcast``, mounted here
by the publisher) accept. :class:`echo2.net.guard.Guard` checks the credential before a byte of the
body is read (401 at once), caps the body while it streams (413) and gives it a deadline (408);
registrations are rate-limited per client address (429, :mod:`echo2.net.ratelimit`); the live
dashboard's data (``/v1/dashboard``) takes the run's read-only viewer credential or the run token
(:mod:`echo2.coordinator.dashboard`); only ``/v1/health``, the API's schema and the dashboard's
page (which holds no data) are open. Bodies are then validated against :mod:`echo2.protocol` before they reach
the state; a refusal is a 4xx whose JSON ``detail`` says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from echo2.coordinator import dashboard
from echo2.coordinator.records import Rejected, WorkerRecord, session_refusal
from echo2.coordinator.state import CoordinatorState
from echo2.net.guard import Door, Guard, Refusal, Tarpit, unauthorized
from echo2.net.ratelimit import RateLimiter
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

#: Largest request body accepted (a submit of a few hundred groups is well under this).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: One worker's budget on the wire (burst, per minute), by its identity: requests of every kind
#: (50 a second: an honest worker of the default run sends a few), and heartbeats apart (an
#: honest worker beats every 2 s at most). Past it, 429 with ``Retry-After``, before the body is
#: read or the books' lock taken: 876 heartbeats a second from one worker had slowed the learner
#: from 3.4 to 1.9 steps/s.
WORKER_REQUESTS = (200, 3000.0)
WORKER_HEARTBEATS = (10, 120.0)
#: The budget every identity that has delivered nothing yet (on trial, or past a trial it missed)
#: shares with all the others (burst, per minute): 20 requests a second in all, while a worker that
#: has delivered keeps its own budget whole. The trial seats (:data:`~echo2.coordinator.membership.TRIAL_SEATS`,
#: more as others deliver) admit about 20 newcomers at once, and an honest one sends under one
#: request a second (a heartbeat every 2 s, a long-polled lease, its first submission).
#: Why: 256 identities from many addresses, each within its own budget (heartbeats, lease asks
#: refused as early), sent ~200 requests a second, and serving them in the learner's process
#: (uvicorn's parsing, the routing, a pool thread each, under the interpreter's one lock) took
#: the learner to half its steps. Past it, 429 held by a :class:`Tarpit` they share: answered at
#: a few a second in all, however many they are.
NEWCOMERS_REQUESTS = (40, 1200.0)
#: Routes anyone may call: liveness, the API's schema (what the fuzz tests read), the dashboard's page.
OPEN_PATHS = frozenset({"/v1/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
                        dashboard.PAGE_PATH})


def create_app(state: CoordinatorState, lease_wait_s: float, *, https_relays_only: bool = False,
               registrations: RateLimiter | None = None, body_timeout_s: float = 60.0,
               run_dir: Path | None = None, doors: Mapping[str, Door] | None = None,
               service_view: Callable[[], dashboard.ServiceView] | None = None) -> FastAPI:
    """The coordinator's routes on ``state``. ``https_relays_only`` (a run served over TLS): a
    worker registering a plain-HTTP relay is refused, so no chunk request of the run goes in clear.
    ``registrations``: the per-address limit on registrations (none when not given). ``run_dir``:
    where the learner writes its metrics, which the dashboard shows beside the coordinator's books.
    ``doors``: routes mounted later, by path prefix, that take a credential of their own (a training
    service's API, :mod:`echo2.service.api`; an agent run's gateway, :mod:`echo2.gateway.api`),
    checked before their bodies are read and capped as each door says (:class:`echo2.net.guard.Door`).
    ``service_view``: that service's clients, for the dashboard."""
    app = FastAPI(title="echo2 coordinator", version="1")
    registry = state.registry
    requests, heartbeats = RateLimiter(*WORKER_REQUESTS), RateLimiter(*WORKER_HEARTBEATS)
    newcomers, tarpit = RateLimiter(*NEWCOMERS_REQUESTS), Tarpit(most_s=10.0)
    registering = Tarpit()
    """Refused registrations, held as one caller: a swarm re-registering from many addresses answered a few a second."""

    def within_budget(path: str, record: WorkerRecord) -> Refusal | None:
        """A worker's request within its budget (None), or the 429 (counted on its record)."""
        wait_s = requests.take(record.worker_id)
        if wait_s is None and path == "/v1/heartbeat":
            wait_s = heartbeats.take(record.worker_id)
        if wait_s is None and path == "/v1/lease" and (early_s := record.ask_again_at - time.monotonic()) > 0:
            wait_s = early_s  # asked again before the retry_after_s it was told
        why, hold_s = f"too many requests from worker {record.name}", None
        if wait_s is None and not record.proven and (wait_s := newcomers.take("")) is not None:
            why = (f"workers that have delivered nothing yet share {NEWCOMERS_REQUESTS[1] / 60:.0f} requests a "
                   f"second, all spent")
            hold_s = tarpit.hold_s("newcomers")
        if wait_s is None:
            return None
        record.rate_limited += 1  # only this thread (the event loop's) writes it
        return Refusal(429, f"{why}; retry in {wait_s:.1f}s", "rate_limited", wait_s, hold_s)

    def authorize(path: str, credential: str | None, client_host: str) -> Refusal | None:
        """Run before the body is read, without the state's lock (the handlers check the rest)."""
        if path in OPEN_PATHS:
            return None
        if path == "/v1/register":
            if not registry.admits(credential):
                return unauthorized("run token")
            wait_s = registrations.take(client_host) if registrations is not None else None
            return None if wait_s is None else Refusal(
                429, f"too many registrations from {client_host}; retry in {wait_s:.0f}s", "rate_limited", wait_s,
                registering.hold_s(""))
        if path == dashboard.DATA_PATH:
            admitted = registry.admits_viewer(credential) or registry.admits(credential)
            return None if admitted else unauthorized("viewer credential (the dashboard link's #token) or run token")
        if path.startswith("/v1/broadcast/"):
            return None if registry.admits_broadcast(credential) else unauthorized("broadcast credential")
        if (record := registry.knows(credential)) is None:
            return Refusal(401, "unknown or missing session credential; register first", "unauthorized")
        return within_budget(path, record)

    dashboard.mount(app, state, run_dir, service_view)
    app.add_middleware(Guard, authorize=authorize, max_body_bytes=MAX_BODY_BYTES, body_timeout_s=body_timeout_s,
                       doors=doors)

    @app.exception_handler(Rejected)
    async def rejected(request: Request, error: Rejected) -> JSONResponse:
        if error.status == 429:  # held as the guard holds its own (a swarm refused a seat on trial re-asked at once)
            registration = request.url.path == "/v1/register"
            await asyncio.sleep(registering.hold_s("") if registration else tarpit.hold_s(error.code))
        headers = {"Retry-After": f"{error.retry_after_s:.0f}"} if error.retry_after_s is not None else None
        return JSONResponse({"detail": error.reason, "code": error.code}, status_code=error.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        # stated without echoing the input back: it may hold NaN/inf, which JSON cannot carry
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5])
        return JSONResponse({"detail": f"invalid request: {problems}", "code": "invalid"}, status_code=422)

    def worker(token: str | None):
        return state.members.authenticate(token)

    @app.get("/v1/health")
    def health() -> dict:
        return {"ok": True, "version": state.version, "finished": state.finished}

    @app.post("/v1/register")
    def register(body: RegisterRequest, request: Request, x_echo2_token: str | None = Header(None)
                 ) -> RegisterResponse:
        if not registry.admits(x_echo2_token):
            raise Rejected(401, f"wrong or missing run token in the {AUTH_HEADER} header", "unauthorized")
        if https_relays_only and body.relay_url is not None and not body.relay_url.startswith("https://"):
            raise Rejected(422, "this run is served over TLS: relay_url must be https:// (start the worker "
                                "with --relay-certfile and --relay-keyfile) or leave it out (--no-relay)", "invalid")
        record = state.members.register(body.name, body.relay_url, body.upload_bytes_per_s, body.price_per_hour,
                                body.worker_class, site=request.client.host if request.client else "")
        return RegisterResponse(worker_id=record.worker_id, session_token=record.session_token, spec=state.spec,
                                broadcast_token=registry.broadcast_token)

    @app.post("/v1/heartbeat")
    def heartbeat(body: Heartbeat, x_echo2_token: str | None = Header(None)) -> HeartbeatResponse:
        return state.members.heartbeat(worker(x_echo2_token), body.version, body.events, body.upload_bytes_per_s,
                               body.slow_sources)

    @app.post("/v1/deregister")
    def deregister(x_echo2_token: str | None = Header(None)) -> dict:
        state.members.deregister(worker(x_echo2_token))
        return {"ok": True}

    @app.post("/v1/lease")
    def lease(body: LeaseRequest, x_echo2_token: str | None = Header(None)) -> LeaseResponse:
        return state.work.lease(worker(x_echo2_token), body.version, body.max_groups, lease_wait_s)

    @app.post("/v1/respond")
    def respond(body: RespondRequest, x_echo2_token: str | None = Header(None)) -> RespondResponse:
        return state.work.respond(worker(x_echo2_token), body)

    @app.post("/v1/fail")
    def fail(body: LeaseFailure, x_echo2_token: str | None = Header(None)) -> dict:
        state.work.fail(worker(x_echo2_token), body)
        return {"ok": True}

    @app.post("/v1/submit")
    def submit(body: SubmitRequest, x_echo2_token: str | None = Header(None)) -> SubmitResponse:
        # a worker declared dead may still learn that a submission whose answer it lost was kept
        # (the leases' check refuses anything else from it with the usual 410)
        record = registry.knows(x_echo2_token)
        if record is None:
            raise session_refusal(None)
        return state.work.submit(record, body)

    @app.get("/v1/version")
    def version(x_echo2_token: str | None = Header(None)) -> VersionInfo:
        return state.version_info(worker(x_echo2_token))

    return app
