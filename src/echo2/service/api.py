"""The Tinker API's routes (``/api/v1/...``) over :class:`~echo2.service.service.TinkerService`.

One pinned SDK minor (``tinker`` 0.38, see ``docs/tinker.md``): its request and response types
are imported from the SDK, never restated. Every route but ``healthz`` needs the service's API
key in ``X-API-Key`` (compared in constant time). A request the service cannot serve is refused
with 400 and a ``detail`` that says why (the SDK raises it to the caller as it is, and does not
retry it); a request id the service does not know is 410, on which the SDK sends its original
request again (answered with the same request id when it was applied, see :mod:`.turns`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pydantic
from fastapi import APIRouter, Depends, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from echo2.coordinator.app import MAX_BODY_BYTES
from echo2.net.guard import Door, Refusal
from echo2.service.keys import ApiKeys
from echo2.service.service import REFUSALS, TinkerService
from echo2.service.turns import ConflictingRetry, RequestError
from echo2.service.wire import ProtoResult, WireError, forward_backward_request

PROTOBUF = "application/x-protobuf"


def _json(model: pydantic.BaseModel) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json", exclude_none=True))


def _future(request_id: str, model_id: str | None = None) -> JSONResponse:
    return _json(types.UntypedAPIFuture(request_id=request_id, model_id=model_id))


#: The routes' path prefix, and the one route open without a key.
PREFIX, HEALTH_PATH = "/api/v1", "/api/v1/healthz"
KEY_REFUSAL = "X-API-Key is missing, wrong or revoked: use the key echo2 serve (or echo2 serve keys add) printed"


def tinker_door(keys: ApiKeys) -> Door:
    """The API's keys checked before a body byte is read (:class:`echo2.net.guard.Door`)."""

    def check(path: str, headers: Mapping[str, str]) -> Refusal | None:
        if path == HEALTH_PATH or keys.tenant_of(headers.get("x-api-key")) is not None:
            return None
        return Refusal(401, KEY_REFUSAL, "unauthorized")

    return Door(check, MAX_BODY_BYTES)


def tinker_router(service: TinkerService, keys: ApiKeys, wait_s: float = 30.0) -> APIRouter:
    """The routes, behind ``keys`` (each request acts as its key's tenant); ``wait_s``: how long one
    ``retrieve_future`` poll is held open."""

    async def tenant(request: Request, x_api_key: str | None = Header(None)) -> None:
        """The key's tenant, as ``request.state.tenant`` (every route but ``healthz`` acts as one)."""
        found = keys.tenant_of(x_api_key)
        if found is None:
            raise HTTPException(401, KEY_REFUSAL)
        request.state.tenant = found

    router = APIRouter(prefix=PREFIX)
    guarded = APIRouter(dependencies=[Depends(tenant)])

    async def body(request: Request, model: type[pydantic.BaseModel]) -> Any:
        """The body as ``model``; its fingerprint (a hash of its bytes) kept for the retry check."""
        raw = await request.body()
        request.state.fingerprint = hashlib.sha256(raw).hexdigest()
        try:
            return model.model_validate_json(raw)
        except pydantic.ValidationError as error:
            raise HTTPException(400, f"{model.__name__}: {_first_error(error)}") from None

    def refusing(handler: Callable[[Request, str], Awaitable[Response]]) -> Callable[[Request, str], Awaitable[Response]]:
        """A route whose refusals (the request cannot be served) are a 400 naming why (409: a retry
        with another body)."""
        async def route(request: Request) -> Response:
            started = time.perf_counter()
            try:
                return await handler(request, request.state.tenant)
            except ConflictingRetry as error:
                raise HTTPException(409, str(error)) from None
            except (*REFUSALS, WireError) as error:
                raise HTTPException(400, str(error)) from None
            finally:
                service.api.add(time.perf_counter() - started - getattr(request.state, "waited_s", 0.0))
        route.__name__ = handler.__name__
        return route

    async def waited(request: Request, request_id: str, who: str):
        """The request's outcome within ``wait_s`` (None: not yet); the wait is not the API's own time."""
        started = time.perf_counter()
        try:
            return await service.futures.wait(request_id, wait_s, who)
        finally:
            request.state.waited_s = time.perf_counter() - started

    def post(path: str):
        return lambda handler: guarded.post(path)(refusing(handler))

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        return _json(types.HealthResponse(status="ok"))

    @post("/client/config")
    async def client_config(request: Request, who: str) -> JSONResponse:
        return _json(types.ClientConfigResponse(pjwt_auth_enabled=False, proto_compress_fwdbwd=False))

    @post("/telemetry")
    async def telemetry(request: Request, who: str) -> JSONResponse:
        return _json(types.TelemetryResponse(status="accepted"))

    @guarded.get("/get_server_capabilities")
    async def capabilities() -> JSONResponse:
        base = service.base
        return _json(types.GetServerCapabilitiesResponse(supported_models=[types.SupportedModel(
            model_name=base.name, max_context_length=base.max_context, trainable=True,
            sampleable=service.sampling is not None)]))

    @post("/create_session")
    async def create_session(request: Request, who: str) -> JSONResponse:
        session = service.create_session(await body(request, types.CreateSessionRequest), who)
        return _json(types.CreateSessionResponse(session_id=session.session_id))

    @post("/session_heartbeat")
    async def heartbeat(request: Request, who: str) -> JSONResponse:
        beat = await body(request, types.SessionHeartbeatRequest)
        if not service.heartbeat(beat.session_id, who):
            raise HTTPException(410, f"session {beat.session_id} has ended")
        return _json(types.SessionHeartbeatResponse())

    @guarded.post("/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request) -> JSONResponse:
        service.finish(session_id, request.state.tenant)
        return JSONResponse({})

    @post("/create_model")
    async def create_model(request: Request, who: str) -> JSONResponse:
        parsed = await body(request, types.CreateModelRequest)
        return _future(service.create_model(parsed, who, request.state.fingerprint))

    @post("/get_info")
    async def get_info(request: Request, who: str) -> JSONResponse:
        return _json(service.info((await body(request, types.GetInfoRequest)).model_id, who))

    @post("/unload_model")
    async def unload_model(request: Request, who: str) -> JSONResponse:
        model_id = (await body(request, types.UnloadModelRequest)).model_id
        return _future(service.unload_model(model_id, who), model_id)

    @post("/forward_backward")
    async def forward_backward(request: Request, who: str) -> JSONResponse:
        if PROTOBUF not in request.headers.get("content-type", ""):
            raise RequestError(f"forward_backward takes a protobuf body ({PROTOBUF}), as tinker SDK >= 0.22.3 sends")
        raw = await request.body()
        # decompressed and parsed off the event loop (a large body is tens of milliseconds of it)
        parsed, forward_only = await asyncio.to_thread(forward_backward_request, raw,
                                                       request.headers.get("content-encoding"))
        fingerprint = hashlib.sha256(raw).hexdigest()
        return _future(service.forward_backward(parsed, forward_only, who, fingerprint), parsed.model_id)

    def queued(path: str, request_type: type[pydantic.BaseModel], queue: Callable[[Any, str, str], str]) -> None:
        """A training client's request queued in its turn: a future of its model."""
        async def handler(request: Request, who: str) -> JSONResponse:
            parsed = await body(request, request_type)
            return _future(queue(parsed, who, request.state.fingerprint), parsed.model_id)
        handler.__name__ = path.strip("/")
        post(path)(handler)

    queued("/optim_step", types.OptimStepRequest, service.optim_step)
    queued("/save_weights", types.SaveWeightsRequest, service.save_weights)
    queued("/save_weights_for_sampler", types.SaveWeightsForSamplerRequest, service.save_for_sampler)

    @post("/load_weights")
    async def load_weights(request: Request, who: str) -> JSONResponse:
        parsed = await body(request, types.LoadWeightsRequest)
        request_id, model_id = service.load_weights(parsed, who, request.state.fingerprint)
        return _future(request_id, model_id)

    @post("/create_sampling_session")
    async def create_sampling_session(request: Request, who: str) -> JSONResponse:
        sampling_session, request_id = service.create_sampling_session(
            await body(request, types.CreateSamplingSessionRequest), who)
        outcome = await waited(request, request_id, who)
        if outcome is None or outcome.error is not None:
            raise HTTPException(503 if outcome is None else 400,
                                "the sampler is still loading: try again" if outcome is None else outcome.error)
        return _json(types.CreateSamplingSessionResponse(sampling_session_id=sampling_session))

    @guarded.get("/samplers/{sampler_id}")
    async def sampler(sampler_id: str, request: Request) -> JSONResponse:
        try:
            name = service.sampling_session(sampler_id, request.state.tenant)
        except RequestError:
            raise HTTPException(404, f"no sampling session {sampler_id!r}") from None
        kept = service.sampling.samplers.get(name) if service.sampling is not None else None
        return _json(types.GetSamplerResponse(sampler_id=sampler_id, base_model=service.base.name,
                                              model_path=kept.path if kept else None))

    @post("/asample")
    async def asample(request: Request, who: str) -> JSONResponse:
        parsed = await body(request, types.SampleRequest)
        request_id, sequence_ids = service.sample(parsed, who, request.state.fingerprint)
        return _json(types.UntypedAPIFuture(request_id=request_id, sample_sequence_ids=sequence_ids))

    @post("/weights_info")
    async def weights_info(request: Request, who: str) -> JSONResponse:
        raw = await request.body()
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("tinker_path", ""), str):
            raise HTTPException(400, 'weights_info takes a JSON object {"tinker_path": "tinker://..."}')
        return _json(service.weights_info(payload.get("tinker_path", ""), who))

    @guarded.get("/training_runs/{run_id}")
    async def training_run(run_id: str, request: Request) -> JSONResponse:
        try:
            return _json(service.training_run(run_id, request.state.tenant))
        except KeyError:
            raise HTTPException(404, f"no training run {run_id!r}") from None

    @post("/retrieve_future")
    async def retrieve_future(request: Request, who: str) -> Response:
        asked = await body(request, types.FutureRetrieveRequest)
        try:
            outcome = await waited(request, asked.request_id, who)
        except KeyError:
            raise HTTPException(410, f"request {asked.request_id} is not known here (the service restarted, "
                                     f"or the result was dropped): send the request again") from None
        if outcome is None:
            return JSONResponse({"type": "try_again", "request_id": asked.request_id, "queue_state": "active"},
                                status_code=408)
        if outcome.error is not None:
            return JSONResponse({"error": outcome.error, "category": outcome.category})
        if isinstance(outcome.result, ProtoResult):
            version = {} if outcome.result.version is None else {"X-Echo2-Version": str(outcome.result.version)}
            return Response(outcome.result.body, media_type=PROTOBUF, headers=version)
        return _json(outcome.result) if outcome.result is not None else JSONResponse({})

    router.include_router(guarded)
    return router


def _first_error(error: pydantic.ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{where}: {first['msg']}"
