"""Serving a node's chunks over HTTP: the same routes on the learner (root source) and on every relay.

Routes (added to any FastAPI app by :func:`add_broadcast_routes`, so the coordinator mounts them
as the root source; :class:`RelayServer` runs them alone on a worker):

* ``GET /v1/broadcast/{version}/manifest?wait_s=`` — the version's :class:`Manifest` (JSON);
* ``GET /v1/broadcast/{version}/chunks/{index}?wait_s=`` — one chunk's bytes;
* ``GET /v1/broadcast/status`` — versions held and how many chunks of each.

A request for something not held yet waits for it up to ``wait_s`` (capped by ``max_wait_s``):
a relay is usually still receiving the very chunk its child asks for, and answering when it
lands is what pipelines a chain. Refusals are JSON ``{"detail", "code"}`` with the number of
chunks held in the ``X-Echo2-Held`` header (a downloader reads it to tell a parent that is
slow but making progress from one that is stuck):

* 404 ``evicted`` (the version is older than the ones kept: it will never come), 404
  ``unknown`` (no manifest for it after the wait), 404 ``no_such_chunk``;
* 503 ``not_yet`` (manifest held, chunk still missing after the wait), 503 ``closed``;
* 401 ``unauthorized`` when a token is configured and the request does not present it.

Every body goes out through the node's :class:`Throttle` (one upload cap for all responses).
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from echo2.broadcast.chunk_store import ChunkStore, StoreClosed, VersionEvicted
from echo2.broadcast.throttle import Throttle
from echo2.protocol import AUTH_HEADER

PREFIX = "/v1/broadcast"
HELD_HEADER = "X-Echo2-Held"


def add_broadcast_routes(app: FastAPI, store: ChunkStore, *, throttle: Throttle | None = None,
                         token: str | None = None, max_wait_s: float = 30.0) -> None:
    """Serve ``store`` under ``/v1/broadcast`` on ``app``; ``token``: the secret every request must carry
    in the ``X-Echo2-Token`` header (None: no check)."""
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
        if token is None or hmac.compare_digest((presented or "").encode(), token.encode()):
            return None
        return refuse(401, f"wrong or missing token in the {AUTH_HEADER} header", "unauthorized")

    async def send(request: Request, data: bytes, media_type: str) -> Response:
        if throttle.latency_s:
            await asyncio.sleep(throttle.latency_s)

        async def body():
            async for piece in throttle.paced(data):
                yield piece
                if await request.is_disconnected():  # stop pacing (and free the link) for a receiver gone away
                    return

        return StreamingResponse(body(), media_type=media_type, headers={"content-length": str(len(data))})

    @app.get(f"{PREFIX}/status")
    async def broadcast_status(x_echo2_token: str | None = Header(None, alias=AUTH_HEADER)) -> Response:
        if (refusal := denied(x_echo2_token)) is not None:
            return refusal
        versions = {}
        for version in store.versions():
            manifest = store.manifest(version)
            if manifest is not None:
                versions[str(version)] = {"held": store.held(version), "chunks": manifest.num_chunks}
        return JSONResponse({"versions": versions})

    @app.get(PREFIX + "/{version}/manifest")
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

    @app.get(PREFIX + "/{version}/chunks/{index}")
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


class RelayServer:
    """A worker's relay: the broadcast routes alone, on uvicorn in a background thread.

    The socket is bound in the constructor (so ``port=0`` yields a known free port before the
    server starts); ``advertise_host`` is the address peers should use when it differs from the
    bound one (e.g. bound to ``0.0.0.0``).
    """

    def __init__(self, store: ChunkStore, host: str = "127.0.0.1", port: int = 0, *,
                 throttle: Throttle | None = None, token: str | None = None, max_wait_s: float = 30.0,
                 advertise_host: str | None = None) -> None:
        self.store = store
        self.throttle = throttle or Throttle()
        self.app = FastAPI(title="echo2 relay", version="1", docs_url=None, redoc_url=None, openapi_url=None)
        add_broadcast_routes(self.app, store, throttle=self.throttle, token=token, max_wait_s=max_wait_s)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        self.advertise_host = advertise_host
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True,
                                        name=f"echo2-relay-{self.port}")

    @property
    def url(self) -> str:
        host = self.advertise_host or ("127.0.0.1" if self.host in ("0.0.0.0", "") else self.host)
        return f"http://{host}:{self.port}"

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._server.serve(sockets=[self._socket])

    def start(self, timeout_s: float = 10.0) -> RelayServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise TimeoutError(f"the relay did not start listening on {self.url} within {timeout_s:g}s")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 5.0, *, abort: bool = False) -> None:
        """Stop serving. ``abort=True`` cuts every open connection at once, as a crash would
        (receivers see a reset, not a clean end): what the fault-tolerance tests use."""
        if abort and self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._abort_connections)
            except RuntimeError:  # the loop closed meanwhile
                pass
        self._server.force_exit = abort
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._socket.close()

    def _abort_connections(self) -> None:
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()

    def __enter__(self) -> RelayServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
