"""Availability attackers: identities that try to stop the learner rather than poison it. A relay
that trickles or says nothing, hoarders that come back with junk, swarms of identities that
hold slots or fabricate, floods of long-polls, heartbeats and timeline events from one
identity; and the probe, an identity that only heartbeats and times each answer.

Each logs ``attack_start`` and ``attack_end`` (the window the bench measures the learner's
steps/s over: :func:`attack_window`) and what it was answered."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from attackers.session import HUGE_UPLOAD, EventLog, Session, fabricated_groups

#: The trickling relay's pace: one byte every half second (the issue's ~1 B/s).
TRICKLE_BYTES, TRICKLE_EVERY_S = 1, 0.5


@contextmanager
def attack_window(log: EventLog, ended: dict[str, Any] | None = None, **fields: Any) -> Iterator[None]:
    """Logs ``attack_start`` with ``fields``, then ``attack_end`` with them and ``ended`` (the
    attack's tally, as it stands then), however the attack ends: one swarm identity's error had
    ended a swarm without its ``attack_end``, and the row then read the whole run as the attack's window."""
    ended = {} if ended is None else ended
    log.emit("attack_start", **fields)
    try:
        yield
    finally:
        log.emit("attack_end", **fields, **ended)


def attack_bad_relay(url: str, token: str, name: str, log: EventLog, silent: bool, duration_s: float,
                     bind_host: str = "127.0.0.1", advertise_host: str | None = None) -> None:
    """A relay that answers the coordinator's check as itself and declares 1e12 B/s (the head of
    every chain), serves the real manifest and then either trickles each chunk's bytes
    (``silent=False``) or never sends a byte of it (``silent=True``), for ``duration_s``; bound to
    ``bind_host``, dialled at ``advertise_host`` (a lab host's own address)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    from echo2.broadcast.chunk_store import ChunkStore
    from echo2.broadcast.downloader import fetch_version
    from echo2.broadcast.relay import DELTA_PREFIX, IDENTITY_PATH, PREFIX
    from echo2.net.serving import BackgroundServer

    stores, holder, served = {PREFIX: ChunkStore(keep=4), DELTA_PREFIX: ChunkStore(keep=4)}, {}, {"bytes": 0,
                                                                                                 "requests": 0}

    def held(prefix: str, version: int) -> ChunkStore:
        """The version (full, or its delta) as the learner serves it, fetched once."""
        store = stores[prefix]
        if store.manifest(version) is None:
            fetch_version(version, [url], store, token=holder["session"].client.broadcast_token, timeout_s=60.0,
                          prefix=prefix)
        return store

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get(IDENTITY_PATH)
    def identity() -> JSONResponse:
        session = holder.get("session")
        return JSONResponse({"worker_id": session.worker_id} if session else {}, status_code=200 if session else 404)

    def serve(prefix: str) -> None:
        """The routes of one prefix (full versions, or deltas): the real manifest, a chunk trickled."""

        def manifest(version: int) -> Response:
            return Response(held(prefix, version).manifest(version).model_dump_json(), media_type="application/json")

        async def chunk(version: int, index: int) -> StreamingResponse:
            data = (await asyncio.to_thread(held, prefix, version)).get_chunk(version, index)
            served["requests"] += 1

            async def body():
                if silent:
                    await asyncio.sleep(3600)
                for offset in range(0, len(data), TRICKLE_BYTES):
                    await asyncio.sleep(TRICKLE_EVERY_S)
                    served["bytes"] += TRICKLE_BYTES
                    yield data[offset:offset + TRICKLE_BYTES]

            return StreamingResponse(body(), media_type="application/octet-stream",
                                     headers={"content-length": str(len(data))})

        app.add_api_route(prefix + "/{version}/manifest", manifest, methods=["GET"])
        app.add_api_route(prefix + "/{version}/chunks/{index}", chunk, methods=["GET"])

    serve(PREFIX)
    serve(DELTA_PREFIX)

    server = BackgroundServer(app, bind_host, 0, what="bad relay", advertise_host=advertise_host, lifespan="off",
                              graceful_s=0.5)
    server.start(10.0)
    session = holder["session"] = Session(url, token, name, log, relay_url=server.url, upload=HUGE_UPLOAD)
    with attack_window(log, served):
        session.stop.wait(duration_s)
    server.stop(abort=True)
    for store in stores.values():
        store.close()
    session.linger()


def attack_recycled_hoarders(url: str, token: str, name: str, log: EventLog, count: int, duration_s: float) -> None:
    """``count`` identities, each holding a one-group lease until the learner has moved S + 2
    versions past it, then submitting fabricated completions (accepted once, never trained:
    stale), and asking again."""
    from echo2.model.loading import load_tokenizer
    from echo2.protocol import SubmitRequest

    sessions = [Session(url, token, f"{name}-{i}", log) for i in range(count)]
    tokenizer = load_tokenizer(sessions[0].spec.model)
    until = time.monotonic() + duration_s

    def hoard(session: Session) -> None:
        while time.monotonic() < until and (lease := session.granted_lease()) is not None:
            while not session.stop.is_set() and time.monotonic() < until:
                session.latest = max(session.latest, session.client.version().version)
                if session.latest >= lease.version + session.spec.staleness + 2:
                    break
                time.sleep(0.2)
            request = SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                    groups=fabricated_groups(lease.prompts, session.spec, tokenizer))
            session.submit(request, f"held {len(lease.prompts)} slots, then junk")

    with attack_window(log):
        run_all(hoard, sessions)
    sessions[0].linger()


def attack_swarm(url: str, token: str, name: str, log: EventLog, count: int, fabricate: bool,
                 duration_s: float) -> None:
    """``count`` identities at once, for ``duration_s``: each holds the lease it gets without
    submitting (``fabricate=False``: a hoarding swarm) or submits fabricated completions for it
    (a fabricating swarm), and asks for the next sooner than it is told to. An identity refused at
    registration (429) tries again; one quarantined registers anew under a new name: the swarm
    keeps ``count`` identities trying for the whole window."""
    from echo2.rollout.client import CoordinatorUnreachable, RequestRefused

    until = time.monotonic() + duration_s
    tokenizer = None
    if fabricate:
        from echo2.model.loading import load_tokenizer
        from echo2.protocol import RegisterRequest
        from echo2.rollout.client import CoordinatorClient

        probe = CoordinatorClient(url, token, give_up_after_s=10.0)
        tokenizer = load_tokenizer(probe.register(RegisterRequest(name=f"{name}-tokenizer")).spec.model)
        probe.deregister()
    tally = {"registered": 0, "refused": 0, "quarantined": 0}
    lock = threading.Lock()

    def identity(index: int) -> None:
        from echo2.protocol import SubmitRequest

        generation = 0
        while time.monotonic() < until:
            try:
                session = Session(url, token, f"{name}-{index}.{generation}", log)
            except (RequestRefused, CoordinatorUnreachable):
                with lock:
                    tally["refused"] += 1
                time.sleep(1.0)
                continue
            with lock:
                tally["registered"] += 1
            generation += 1
            while time.monotonic() < until and not session.stop.is_set():
                try:
                    lease = session.lease()
                except CoordinatorUnreachable:  # its client gave up on a dropped connection: ask again
                    time.sleep(0.5)
                    continue
                except RequestRefused as error:
                    if error.status == 403:  # quarantined: a new name
                        with lock:
                            tally["quarantined"] += 1
                        break
                    time.sleep(0.5)
                    continue
                if lease is None:
                    time.sleep(0.5)  # asks again sooner than the Retry-After it was told
                elif fabricate:
                    session.submit(SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                                 groups=fabricated_groups(lease.prompts, session.spec, tokenizer)),
                                   "fabricated (swarm)")
            session.stop.set()

    with attack_window(log, tally, count=count):
        run_all(identity, range(count))


def attack_flood(url: str, token: str, name: str, log: EventLog, what: str, duration_s: float) -> None:
    """One identity floods, on raw HTTP (no client that waits out a 429): ``longpolls`` (100
    concurrent lease requests, again and again), ``heartbeats`` (as fast as 8 threads send them),
    ``events`` (heartbeats of 1000 timeline events each) or ``wide_interval`` (a ``generate``
    interval spanning +-86,000 s, once a second)."""
    import httpx

    from echo2.protocol import AUTH_HEADER, RegisterRequest
    from echo2.rollout.client import CoordinatorClient

    client = CoordinatorClient(url, token, give_up_after_s=10.0)  # no heartbeats of its own: the flood keeps it
    client.register(RegisterRequest(name=name))
    headers = {AUTH_HEADER: client.session_token}
    counts = {"sent": 0, "refused": 0, "failed": 0}
    until = time.monotonic() + duration_s
    threads = {"longpolls": 100, "heartbeats": 8, "events": 2, "wide_interval": 1}[what]

    with httpx.Client(base_url=url, limits=httpx.Limits(max_connections=threads + 4), timeout=30.0) as http:
        def send(_: int) -> None:
            while time.monotonic() < until:
                now = time.time()
                if what == "longpolls":
                    path, body = "/v1/lease", {"version": 0, "max_groups": 4096}
                else:
                    events = ([{"kind": "generate", "start": now - 86_000, "end": now + 86_000, "version": 0}]
                              if what == "wide_interval" else
                              [{"kind": "generate", "start": now - 0.01, "end": now, "version": 0}] * 1000)
                    path, body = "/v1/heartbeat", {"version": 0, "events": events if what != "heartbeats" else []}
                try:
                    status = http.post(path, json=body, headers=headers).status_code
                except httpx.HTTPError:
                    counts["failed"] += 1
                    time.sleep(0.1)
                    continue
                counts["sent"] += 1
                counts["refused"] += status == 429
                if what == "wide_interval":  # one a second: each would stretch the timeline two days
                    time.sleep(1.0)

        with attack_window(log, counts, what=what):
            run_all(send, range(threads))


def attack_call_flood(url: str, token: str, log: EventLog, duration_s: float, calls: int = 100) -> None:
    """An agent run's episode key holder (the run token's): claims one episode and keeps ``calls``
    model calls on its key open at once, again and again, never rewarding it. 100 such calls had
    held 100 server threads until a worker answered each (an honest worker's heartbeat took 30 s)."""
    import httpx

    counts = {"sent": 0, "refused": 0, "failed": 0, "answered": 0}
    until = time.monotonic() + duration_s
    with httpx.Client(base_url=url, limits=httpx.Limits(max_connections=calls + 4), timeout=60.0) as http:
        opened = http.post("/rl/episodes", params={"wait_s": 30}, headers={"X-Echo2-Token": token})
        if opened.status_code != 200:
            log.emit("crashed", error=f"no episode to flood: {opened.status_code} {opened.text[:200]}")
            return
        key = opened.json()["key"]

        def send(_: int) -> None:
            while time.monotonic() < until:
                try:
                    status = http.post("/v1/completions", json={"model": "policy", "prompt": "1+1="},
                                       headers={"Authorization": f"Bearer {key}"}).status_code
                except httpx.HTTPError:
                    counts["failed"] += 1
                    time.sleep(0.1)
                    continue
                counts["sent"] += 1
                counts["refused"] += status == 429
                counts["answered"] += status == 200
                if status == 410:  # the episode was dropped (its deadline): claim no more, the flood is over
                    return

        with attack_window(log, counts, what="calls"):
            run_all(send, range(calls))


def probe_heartbeats(url: str, token: str, name: str, log: EventLog) -> None:
    """An identity that only heartbeats, twice a second (its only beats: within its budget), and
    logs how long each answer took, until the coordinator says the run is over."""
    from echo2.protocol import Heartbeat, RegisterRequest
    from echo2.rollout.client import CoordinatorClient, CoordinatorUnreachable, RequestRefused

    client = CoordinatorClient(url, token, give_up_after_s=10.0)
    client.register(RegisterRequest(name=name))
    while True:
        time.sleep(0.5)
        started = time.perf_counter()
        try:
            reply = client.heartbeat(Heartbeat(version=0))
        except CoordinatorUnreachable:
            return
        except RequestRefused as error:
            log.emit("probe_refused", status=error.status)
            continue
        log.emit("probe", seconds=time.perf_counter() - started)
        if reply.stop:
            return


def run_all(task: Any, items: Any, workers: int | None = None) -> None:
    items = list(items)
    with ThreadPoolExecutor(max(1, workers or len(items))) as pool:
        for result in [pool.submit(task, item) for item in items]:
            result.result()
