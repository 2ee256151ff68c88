"""A relay that serves substituted or corrupted weights to the peers the plan sends it (it answers
the coordinator's reachability check as itself, so the plan does send them)."""

from __future__ import annotations

import threading
from collections import Counter

from attackers.session import HUGE_UPLOAD, EventLog, Session


def attack_relay(url: str, token: str, name: str, log: EventLog) -> None:
    """Serve substituted (even versions) or corrupted (odd versions) weights to whoever the plan
    sends here. The real weights come from the learner, with the broadcast credential every worker holds."""
    import numpy as np
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response

    from echo2.broadcast.chunk_store import ChunkStore
    from echo2.broadcast.downloader import fetch_version
    from echo2.broadcast.manifest import build_manifest
    from echo2.broadcast.relay import IDENTITY_PATH
    from echo2.net.serving import BackgroundServer

    prepared: dict[int, tuple] = {}
    lock = threading.Lock()
    store = ChunkStore(keep=4)
    served: Counter[str] = Counter()
    holder: dict[str, Session] = {}

    def prepare(version: int) -> tuple:
        with lock:
            if version not in prepared:
                result = fetch_version(version, [url], store, token=holder["session"].client.broadcast_token,
                                       timeout_s=60.0)
                real, payload = result.manifest, result.payload
                _, real_chunks = build_manifest(payload, version, chunk_size=real.chunk_size, kind=real.kind,
                                                dtype=real.dtype)
                data_start = 8 + int.from_bytes(payload[:8], "little")  # safetensors: header length, header, data
                forged = np.frombuffer(payload, dtype=np.uint8).copy()
                forged[data_start::4] ^= 0xFF  # the low byte of every float32: other weights, a valid payload
                fake, fake_chunks = build_manifest(forged.tobytes(), version, chunk_size=real.chunk_size,
                                                   kind=real.kind, dtype=real.dtype)
                prepared[version] = (real, real_chunks, fake, fake_chunks)
                for old in [v for v in prepared if v < version - 3]:
                    del prepared[old]
            return prepared[version]

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get(IDENTITY_PATH)  # it answers as itself, as an honest relay does: the plan then uses it
    def identity() -> JSONResponse:
        session = holder.get("session")
        return JSONResponse({"worker_id": session.worker_id} if session else {}, status_code=200 if session else 404)

    @app.get("/v1/broadcast/status")
    def status() -> JSONResponse:
        return JSONResponse({"versions": {}})

    @app.get("/v1/broadcast/{version}/manifest")
    def manifest(version: int) -> Response:
        real, _, fake, _ = prepare(version)
        substitute = version % 2 == 0
        served["manifests_substituted" if substitute else "manifests_real"] += 1
        return Response((fake if substitute else real).model_dump_json(), media_type="application/json")

    @app.get("/v1/broadcast/{version}/chunks/{index}")
    def chunk(version: int, index: int) -> Response:
        _, real_chunks, _, fake_chunks = prepare(version)
        if version % 2 == 0:
            data = fake_chunks[index]
            served["chunks_substituted"] += 1
        else:
            corrupted = bytearray(real_chunks[index])
            corrupted[len(corrupted) // 2] ^= 0x01
            data = bytes(corrupted)
            served["chunks_corrupted"] += 1
        return Response(data, media_type="application/octet-stream")

    server = BackgroundServer(app, "127.0.0.1", 0, what="fake relay", lifespan="off", graceful_s=0.5)
    server.start(10.0)
    session = holder["session"] = Session(url, token, name, log, relay_url=server.url, upload=HUGE_UPLOAD)
    while not session.stop.wait(0.5):
        try:
            prepare(session.latest)
        except Exception as error:  # noqa: BLE001 - keep serving; say why a version could not be prepared
            log.emit("prepare_failed", version=session.latest, error=repr(error))
        log.emit("relay_served", **served)
    log.emit("relay_served", **served)
    server.stop(abort=True)
    store.close()
