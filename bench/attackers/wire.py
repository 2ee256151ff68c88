"""Attacks on the wire itself, over raw sockets: oversize and chunked bodies, a registration
flood, slow-loris connections."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from attackers.session import HUGE_UPLOAD, MIB, EventLog, Session


def _connect(url: str, timeout_s: float = 10.0) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout_s)


def _status(answer: bytes) -> int | None:
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else None


def announced_body(url: str, method: str, path: str, headers: dict[str, str], length: int,
                   wait_s: float = 5.0) -> dict[str, Any]:
    """Send only the head of a request that announces a ``length``-byte body; whatever is answered
    came before a single body byte was sent."""
    started = time.perf_counter()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with _connect(url) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n{head}\r\n".encode())
        sock.settimeout(wait_s)
        try:
            answer = sock.recv(65536)
        except (TimeoutError, OSError):
            answer = b""
    return {"status": _status(answer), "body_bytes_sent": 0, "seconds": time.perf_counter() - started}


def chunked_body(url: str, path: str, headers: dict[str, str], total: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """POST up to ``total`` bytes chunked (no Content-Length), reading while sending; stop as
    soon as an answer arrives. Returns the status and the body bytes sent by then."""
    started = time.perf_counter()
    sock = _connect(url)
    sock.setblocking(False)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    pending = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Transfer-Encoding: chunked\r\n{head}\r\n").encode()
    piece = 64 * 1024
    chunk = f"{piece:x}\r\n".encode() + b"x" * piece + b"\r\n"
    sent, answer, writing = 0, b"", True
    deadline = time.monotonic() + timeout_s
    try:
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if writing else [], [], 0.5)
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                answer += data
                continue
            if writable:
                if not pending:
                    if sent >= total:
                        pending, writing = b"0\r\n\r\n", False
                    else:
                        pending, sent = chunk, sent + piece
                try:
                    pending = pending[sock.send(pending):]
                except (BrokenPipeError, ConnectionResetError):
                    writing = False
    finally:
        sock.close()
    return {"status": _status(answer), "body_bytes_sent": sent, "seconds": time.perf_counter() - started}


def attack_oversize(session: Session, run_dir: Path) -> None:
    from echo2.protocol import AUTH_HEADER

    url, session_token = session.url, session.client.session_token
    probes = [
        ("coordinator, no credential, Content-Length 64 MiB", 401,
         lambda: announced_body(url, "POST", "/v1/submit", {}, 64 * MIB)),
        ("coordinator, session credential, Content-Length 64 MiB", 413,
         lambda: announced_body(url, "POST", "/v1/submit", {AUTH_HEADER: session_token}, 64 * MIB)),
        ("coordinator, no credential, chunked 64 MiB", 401,
         lambda: chunked_body(url, "/v1/submit", {}, 64 * MIB)),
        ("coordinator, session credential, chunked 64 MiB", 413,
         lambda: chunked_body(url, "/v1/submit", {AUTH_HEADER: session_token}, 64 * MIB)),
    ]
    relay = session.peer_relay(run_dir)
    if relay is not None:
        broadcast = session.client.broadcast_token
        probes += [
            ("relay, no credential, Content-Length 1 MiB", 401,
             lambda: announced_body(relay, "GET", "/v1/broadcast/status", {}, MIB)),
            ("relay, broadcast credential, Content-Length 4 KiB", 413,
             lambda: announced_body(relay, "GET", "/v1/broadcast/status", {AUTH_HEADER: broadcast}, 4096)),
        ]
    else:
        session.log.emit("no_peer_relay")
    for what, expected, probe in probes:
        session.log.emit("probe", what=what, expected=expected, **probe())
    session.linger()


def attack_flood(url: str, token: str, log: EventLog, count: int = 200, parallel: int = 8) -> None:
    import httpx

    from echo2.protocol import AUTH_HEADER

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    results: list[tuple[int, float]] = []
    worker_ids: list[str] = []

    def register(i: int) -> None:
        body: dict[str, Any] = {"name": f"sybil-{i}"}
        if i % 2 == 0:
            body.update(relay_url=f"http://127.0.0.1:{closed_port}", upload_bytes_per_s=HUGE_UPLOAD)
        started = time.perf_counter()
        try:
            reply = httpx.post(f"{url}/v1/register", json=body, headers={AUTH_HEADER: token}, timeout=30)
            status = reply.status_code
            if status == 200:
                worker_ids.append(reply.json()["worker_id"])
        except httpx.HTTPError:
            status = 0
        results.append((status, time.perf_counter() - started))

    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(register, range(count)))
    latencies = sorted(seconds for _, seconds in results)
    log.emit("flood", count=count, seconds=time.perf_counter() - started,
             statuses=dict(Counter(str(status) for status, _ in results)),
             latency_p50_s=latencies[len(latencies) // 2], latency_max_s=latencies[-1],
             sybil_relays=(count + 1) // 2, closed_port=closed_port, worker_ids=worker_ids)


def attack_slowloris(session: Session, run_dir: Path, per_target: int = 50) -> None:
    from echo2.protocol import AUTH_HEADER

    targets = [("coordinator, anonymous, headers", session.url, "headers"),
               ("coordinator, session credential, body", session.url, "body")]
    relay = session.peer_relay(run_dir)
    if relay is not None:
        targets.append(("peer relay, anonymous, headers", relay, "headers"))
    connections: list[dict[str, Any]] = []
    for label, url, mode in targets:
        for _ in range(per_target):
            try:
                sock = _connect(url)
                if mode == "headers":
                    sock.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                else:
                    sock.sendall(f"POST /v1/heartbeat HTTP/1.1\r\nHost: x\r\n{AUTH_HEADER}: "
                                 f"{session.client.session_token}\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: 100000\r\n\r\n".encode())
            except OSError as error:
                session.log.emit("slowloris_connect_failed", target=label, error=repr(error))
                continue
            sock.setblocking(False)
            connections.append({"label": label, "sock": sock, "open": True, "status": None, "closed_at": None})
    def watch() -> None:  # the run's end, as soon as the coordinator says so (before its servers stop)
        import httpx

        while not session.stop.wait(0.25):
            try:
                if httpx.get(f"{session.url}/v1/health", timeout=5).json().get("finished"):
                    session.stop.set()
            except (httpx.HTTPError, ValueError):
                pass

    threading.Thread(target=watch, daemon=True, name="watch-finish").start()
    started = time.time()
    while not session.stop.wait(1.0):
        for c in connections:
            if not c["open"]:
                continue
            try:
                readable, _, _ = select.select([c["sock"]], [], [], 0)
                if readable:
                    data = c["sock"].recv(4096)
                    c["status"] = _status(data) if data else None
                    raise ConnectionError("answered or closed by the server")
                c["sock"].send(b"a")
            except OSError:
                c["open"], c["closed_at"] = False, time.time()
                c["sock"].close()
    held_s = time.time() - started
    summary = {}
    for label, _, _ in targets:
        mine = [c for c in connections if c["label"] == label]
        closed = [c for c in mine if not c["open"]]
        summary[label] = {"opened": len(mine), "statuses": dict(Counter(str(c["status"]) for c in closed)),
                          "closed_at": [c["closed_at"] for c in closed]}
    for c in connections:
        if c["open"]:
            c["sock"].close()
    session.log.emit("slowloris", started=started, held_s=held_s, targets=summary)
