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

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from echo2.broadcast.chunk_store import ChunkStore, StoreClosed, VersionEvicted
from echo2.broadcast.throttle import Throttle
from echo2.protocol import AUTH_HEADER
from echo2.serving import BackgroundServer

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


class RelayServer(BackgroundServer):
    """A worker's relay: the broadcast routes alone, on uvicorn in a background thread."""

    def __init__(self, store: ChunkStore, host: str = "127.0.0.1", port: int = 0, *,
                 throttle: Throttle | None = None, token: str | None = None, max_wait_s: float = 30.0,
                 advertise_host: str | None = None) -> None:
        self.store = store
        self.throttle = throttle or Throttle()
        self.app = FastAPI(title="echo2 relay", version="1", docs_url=None, redoc_url=None, openapi_url=None)
        add_broadcast_routes(self.app, store, throttle=self.throttle, token=token, max_wait_s=max_wait_s)
        super().__init__(self.app, host, port, what="relay", advertise_host=advertise_host, lifespan="off",
                         graceful_s=1.0)

    def start(self, timeout_s: float = 10.0) -> RelayServer:
        super().start(timeout_s)
        return self

    def __enter__(self) -> RelayServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
