"""The coordinator's HTTP API (FastAPI). The learner never connects to a worker: workers pull.

Authentication: ``register`` needs the run token; it returns a per-worker session credential
that every later call presents (same header), so a worker can only act on its own leases.
Every body is size-limited and validated against :mod:`echo2.protocol` before it reaches the
state; a refusal is a 4xx whose JSON ``detail`` says why.
"""

from __future__ import annotations

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from echo2.coordinator.records import Rejected
from echo2.coordinator.state import CoordinatorState
from echo2.protocol import (
    AUTH_HEADER,
    Heartbeat,
    HeartbeatResponse,
    LeaseRequest,
    LeaseResponse,
    RegisterRequest,
    RegisterResponse,
    SubmitRequest,
    SubmitResponse,
    VersionInfo,
)

#: Largest request body accepted (a submit of a few hundred groups is well under this).
MAX_BODY_BYTES = 16 * 1024 * 1024


def create_app(state: CoordinatorState, lease_wait_s: float) -> FastAPI:
    app = FastAPI(title="echo2 coordinator", version="1")

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and int(length) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"body larger than {MAX_BODY_BYTES} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(Rejected)
    async def rejected(_: Request, error: Rejected) -> JSONResponse:
        return JSONResponse({"detail": error.reason, "code": error.code}, status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        # stated without echoing the input back: it may hold NaN/inf, which JSON cannot carry
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5])
        return JSONResponse({"detail": f"invalid request: {problems}", "code": "invalid"}, status_code=422)

    def worker(token: str | None):
        return state.authenticate(token)

    @app.get("/v1/health")
    def health() -> dict:
        return {"ok": True, "version": state.version, "finished": state.finished}

    @app.post("/v1/register")
    def register(body: RegisterRequest, x_echo2_token: str | None = Header(None)) -> RegisterResponse:
        if not state.admits(x_echo2_token):
            raise Rejected(401, f"wrong or missing run token in the {AUTH_HEADER} header", "unauthorized")
        record = state.register(body.name, body.relay_url, body.upload_bytes_per_s, body.price_per_hour,
                                body.worker_class)
        return RegisterResponse(worker_id=record.worker_id, session_token=record.session_token, spec=state.spec)

    @app.post("/v1/heartbeat")
    def heartbeat(body: Heartbeat, x_echo2_token: str | None = Header(None)) -> HeartbeatResponse:
        return state.heartbeat(worker(x_echo2_token), body.version, body.events, body.upload_bytes_per_s)

    @app.post("/v1/deregister")
    def deregister(x_echo2_token: str | None = Header(None)) -> dict:
        state.deregister(worker(x_echo2_token))
        return {"ok": True}

    @app.post("/v1/lease")
    def lease(body: LeaseRequest, x_echo2_token: str | None = Header(None)) -> LeaseResponse:
        return state.lease(worker(x_echo2_token), body.version, body.max_groups, lease_wait_s)

    @app.post("/v1/submit")
    def submit(body: SubmitRequest, x_echo2_token: str | None = Header(None)) -> SubmitResponse:
        return state.submit(worker(x_echo2_token), body)

    @app.get("/v1/version")
    def version(x_echo2_token: str | None = Header(None)) -> VersionInfo:
        return state.version_info(worker(x_echo2_token))

    return app
