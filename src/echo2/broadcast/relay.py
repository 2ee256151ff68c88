"""Serving a node's chunks over HTTP: the same routes on the learner (root source) and on every relay.

Routes (added to any FastAPI app by :func:`add_broadcast_routes`, so the coordinator mounts them
as the root source; :class:`RelayServer` runs them alone on a worker):

* ``GET /v1/broadcast/{version}/manifest?wait_s=`` — the version's :class:`Manifest` (JSON);
* ``GET /v1/broadcast/{version}/chunks/{index}?wait_s=`` — one chunk's bytes;
* ``GET /v1/broadcast/status`` — versions held and how many chunks of each;
* ``GET /v1/relay/identity`` (a :class:`RelayServer` only) — ``{"worker_id"}`` of the worker it
  serves, so that the coordinator can tell that an advertised address really reaches it
  (:mod:`echo2.coordinator.relay_check`); 404 until the worker has registered.

A request for something not held yet waits for it up to ``wait_s`` (capped by ``max_wait_s``):
a relay is usually still receiving the very chunk its child asks for, and answering when it
lands is what pipelines a chain. Refusals are JSON ``{"detail", "code"}`` with the number of
chunks held in the ``X-Echo2-Held`` header (a downloader reads it to tell a parent that is
slow but making progress from one that is stuck):

* 404 ``evicted`` (the version is older than the ones kept: it will never come), 404
  ``unknown`` (no manifest for it after the wait), 404 ``no_such_chunk``;
* 503 ``not_yet`` (manifest held, chunk still missing after the wait), 503 ``closed``;
* 401 ``unauthorized`` when a token is configured and the request does not present it.

The token is the run's broadcast credential (:func:`echo2.net.guard.broadcast_credential`): it opens
these routes and nothing else, so a relay, which may belong to anyone who joined the run, never
sees a credential worth stealing. A :class:`RelayServer` also sits behind :class:`echo2.net.guard.Guard`
(the credential checked before anything else, request bodies capped at :data:`MAX_BODY_BYTES`:
these routes take none) and serves TLS when given a certificate.

Every body goes out through the node's :class:`Throttle` (one upload cap for all responses).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from echo2.broadcast.chunk_store import ChunkStore, StoreClosed, VersionEvicted
from echo2.broadcast.throttle import Throttle
from echo2.net.guard import Guard, Refusal, same_secret, unauthorized
from echo2.net.serving import BackgroundServer
from echo2.protocol import AUTH_HEADER

PREFIX = "/v1/broadcast"
#: Where a relay says whose it is (the coordinator's reachability check).
IDENTITY_PATH = "/v1/relay/identity"
#: Where a node serves delta versions (:mod:`echo2.broadcast.delta`): the same routes, its delta store.
DELTA_PREFIX = PREFIX + "/delta"
HELD_HEADER = "X-Echo2-Held"
#: Largest request body a relay accepts (its routes are GETs: none is needed).
MAX_BODY_BYTES = 1024

#: The credential a node's routes accept: a fixed one, one read at each request, or None (open).
Token = str | Callable[[], "str | None"] | None


def _expected(token: Token) -> str | None:
    return token() if callable(token) else token


def add_broadcast_routes(app: FastAPI, store: ChunkStore, *, throttle: Throttle | None = None,
                         token: Token = None, max_wait_s: float = 30.0, prefix: str = PREFIX) -> None:
    """Serve ``store`` under ``prefix`` (``/v1/broadcast``; deltas: :data:`DELTA_PREFIX`) on ``app``; ``token``: the credential every request
    must carry in the ``X-Echo2-Token`` header (the run's broadcast credential; a callable is
    asked at each request; None: no check)."""
    throttle = throttle or Throttle()

    def refuse(status: int, detail: str, code: str, version: int | None = None) -> JSONResponse:
        held = 0
        if version is not None:
            try:
                held = store.held(version)
            except (LookupError, StoreClosed):
                pass
        return JSONResponse({"detail": detail, "code": code}, status_code=status, headers={HELD_HEADER: str(held)})

    def denied(presented: str | None) -> JSONResponse | None:
        if token is None or same_secret(presented, _expected(token)):
            return None
        return refuse(401, f"wrong or missing broadcast credential in the {AUTH_HEADER} header", "unauthorized")

    async def send(request: Request, data: bytes, media_type: str) -> Response:
        if throttle.latency_s:
            await asyncio.sleep(throttle.latency_s)

        async def body():
            async for piece in throttle.paced(data):
                yield piece
                if await request.is_disconnected():  # stop pacing (and free the link) for a receiver gone away
                    return

        return StreamingResponse(body(), media_type=media_type, headers={"content-length": str(len(data))})

    @app.get(f"{prefix}/status")
    async def broadcast_status(x_echo2_token: str | None = Header(None, alias=AUTH_HEADER)) -> Response:
        if (refusal := denied(x_echo2_token)) is not None:
            return refusal
        versions = {}
        for version in store.versions():
            manifest = store.manifest(version)
            if manifest is not None:
                versions[str(version)] = {"held": store.held(version), "chunks": manifest.num_chunks}
        return JSONResponse({"versions": versions})

    @app.get(prefix + "/{version}/manifest")
    async def broadcast_manifest(request: Request, version: int, wait_s: float = Query(0.0, ge=0),
                                 x_echo2_token: str | None = Header(None, alias=AUTH_HEADER)) -> Response:
        if (refusal := denied(x_echo2_token)) is not None:
            return refusal
        wait_s = min(wait_s, max_wait_s)
        try:
            manifest = await store.aget_manifest(version, wait_s)
        except VersionEvicted as error:
            return refuse(404, str(error), "evicted")
        except StoreClosed as error:
            return refuse(503, str(error), "closed")
        if manifest is None:
            return refuse(404, f"v{version} is not held here (waited {wait_s:g}s)", "unknown", version)
        return await send(request, manifest.model_dump_json().encode(), "application/json")

    @app.get(prefix + "/{version}/chunks/{index}")
    async def broadcast_chunk(request: Request, version: int, index: int, wait_s: float = Query(0.0, ge=0),
                              x_echo2_token: str | None = Header(None, alias=AUTH_HEADER)) -> Response:
        if (refusal := denied(x_echo2_token)) is not None:
            return refusal
        wait_s = min(wait_s, max_wait_s)
        try:
            data = await store.aget_chunk(version, index, wait_s)
        except VersionEvicted as error:
            return refuse(404, str(error), "evicted")
        except IndexError as error:
            return refuse(404, str(error), "no_such_chunk", version)
        except StoreClosed as error:
            return refuse(503, str(error), "closed")
        if data is None:
            if store.manifest(version) is None:
                return refuse(404, f"v{version} is not held here (waited {wait_s:g}s)", "unknown", version)
            return refuse(503, f"v{version} chunk {index} not here yet (waited {wait_s:g}s)", "not_yet", version)
        return await send(request, data, "application/octet-stream")


@dataclass(frozen=True)
class RelayOptions:
    """How this worker serves weight chunks to its peers."""

    bind_host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 for peers on other machines)."""
    port: int = 0
    """Port; 0 picks a free one."""
    advertise_host: str | None = None
    """Address peers should dial when it differs from ``bind_host`` (e.g. the public IP)."""
    upload_bytes_per_s: float | None = None
    """Upload cap (token bucket) standing for this worker's uplink; None = uncapped."""
    latency_s: float = 0.0
    """Delay added to every relay response (standing for a WAN round trip)."""
    certfile: str | None = None
    """Certificate (PEM) the relay serves TLS with, with ``keyfile``; None: plain HTTP."""
    keyfile: str | None = None


class RelayServer(BackgroundServer):
    """A worker's relay: the broadcast routes alone, behind :class:`~echo2.net.guard.Guard`, on
    uvicorn in a background thread; ``certfile``/``keyfile``: serve TLS (an ``https://`` URL)."""

    def __init__(self, store: ChunkStore, host: str = "127.0.0.1", port: int = 0, *,
                 throttle: Throttle | None = None, token: Token = None, max_wait_s: float = 30.0,
                 advertise_host: str | None = None, certfile: str | None = None,
                 keyfile: str | None = None, deltas: ChunkStore | None = None) -> None:
        """``deltas``: the node's store of delta versions, served under :data:`DELTA_PREFIX`
        through the same upload cap (a run with ``broadcast.encoding: delta``)."""
        self.store = store
        self.throttle = throttle or Throttle()
        self.app = FastAPI(title="echo2 relay", version="1", docs_url=None, redoc_url=None, openapi_url=None)
        add_broadcast_routes(self.app, store, throttle=self.throttle, token=token, max_wait_s=max_wait_s)
        if deltas is not None:
            add_broadcast_routes(self.app, deltas, throttle=self.throttle, token=token, max_wait_s=max_wait_s,
                                 prefix=DELTA_PREFIX)

        def authorize(path: str, credential: str | None, client_host: str) -> Refusal | None:  # noqa: ARG001
            expected = _expected(token)
            return None if expected is None or same_secret(credential, expected) else \
                unauthorized("broadcast credential")

        self.identity: str | None = None
        """The id of the worker this relay serves, once it has one (its worker sets it at registration)."""

        @self.app.get(IDENTITY_PATH)
        async def relay_identity() -> Response:
            if self.identity is None:
                return JSONResponse({"detail": "this relay's worker has not registered yet", "code": "unknown"},
                                    status_code=404)
            return JSONResponse({"worker_id": self.identity})

        self.app.add_middleware(Guard, authorize=authorize, max_body_bytes=MAX_BODY_BYTES)
        super().__init__(self.app, host, port, what="relay", advertise_host=advertise_host, lifespan="off",
                         graceful_s=1.0, certfile=certfile, keyfile=keyfile)

    def start(self, timeout_s: float = 10.0) -> RelayServer:
        super().start(timeout_s)
        return self

    def __enter__(self) -> RelayServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
