"""Clients that take their time or come in crowds: the request head's and body's deadlines
(slow loris) and the per-address registration limit (a registration flood)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from state_support import make_state

from echo2.coordinator.app import create_app
from echo2.coordinator.server import CoordinatorServer
from echo2.net.ratelimit import RateLimiter
from echo2.protocol import AUTH_HEADER, LeaseRequest, RegisterRequest
from echo2.rollout.client import CoordinatorClient


@pytest.fixture()
def door():
    """The coordinator on loopback with short deadlines and a small registration allowance."""
    state = make_state(staleness=1)
    app = create_app(state, lease_wait_s=2.5, registrations=RateLimiter(burst=3, per_minute=60), body_timeout_s=1.0)
    server = CoordinatorServer(app, "127.0.0.1", 0, head_timeout_s=1.0)
    server.start(10)
    yield state, server
    server.stop()


#: Seconds after which the dribble stops (the server's deadlines are 1 s): a byte that reaches the
#: server after it closed makes its kernel answer with a reset, which discards the unread rest of
#: the answer on this side (CI lost a 408's body so once).
QUIET_FROM_S = 0.9


def held_until_answered(sock: socket.socket, dribble: bytes, limit_s: float) -> tuple[float, bytes]:
    """Send ``dribble`` one byte every 0.1 s (until :data:`QUIET_FROM_S`) until the server answers or
    closes; (seconds until the first byte of the answer, the whole answer: read until the server
    closes, as its head and body may come in separate segments)."""
    sock.settimeout(0.1)
    started = time.monotonic()
    for byte in dribble * 1000:
        if time.monotonic() - started > limit_s:
            break
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            answer = None
        if answer is not None:  # b"" means closed without an answer
            held = time.monotonic() - started
            return held, (answer + rest_of_answer(sock) if answer else b"")
        if time.monotonic() - started > QUIET_FROM_S:
            continue
        try:
            sock.send(bytes([byte]))
        except OSError:
            return time.monotonic() - started, b""
    raise AssertionError(f"still open after {limit_s}s")


def rest_of_answer(sock: socket.socket, limit_s: float = 5.0) -> bytes:
    """What the server sends until it closes the connection (or stops sending for ``limit_s``)."""
    sock.settimeout(limit_s)
    parts = []
    try:
        while chunk := sock.recv(4096):
            parts.append(chunk)
    except TimeoutError:
        pass
    return b"".join(parts)


def test_a_request_head_sent_byte_by_byte_is_cut_off(door):
    _, server = door
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/lease HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        held, answer = held_until_answered(sock, b"a", limit_s=8)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert 0.8 < held < 3.0  # the 1 s deadline, not the dribble's end
    # an honest client is not hurt, and a long-poll lease outlives the head deadline (it is the head's, not the request's)
    client = CoordinatorClient(server.url, "t")
    client.register(RegisterRequest(name="honest"))
    started = time.monotonic()
    client.lease(LeaseRequest(version=0, max_groups=100), wait_s=2.5)
    client.lease(LeaseRequest(version=0, max_groups=100), wait_s=2.5)  # the window is full: it waits
    assert time.monotonic() - started > 2.0


def test_a_body_sent_byte_by_byte_is_cut_off_at_its_deadline(door):
    state, server = door
    session = state.members.register("w").session_token
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(f"POST /v1/heartbeat HTTP/1.1\r\nHost: x\r\n{AUTH_HEADER}: {session}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n".encode())
        held, answer = held_until_answered(sock, b" ", limit_s=8)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"body not received within 1s" in answer
    assert 0.8 < held < 3.0


def test_registrations_past_the_allowance_get_429_and_workers_wait_it_out(door):
    _, server = door
    answers = [httpx.post(f"{server.url}/v1/register", json={"name": f"sybil-{i}"}, headers={AUTH_HEADER: "t"})
               for i in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]  # a 429 is held a second (TARPIT_S)
    assert answers[3].json()["code"] == "rate_limited" and int(answers[3].headers["retry-after"]) >= 1
    assert httpx.post(f"{server.url}/v1/register", json={"name": "x"}).status_code == 401  # no token: not counted
    refilled = httpx.post(f"{server.url}/v1/register", json={"name": "sybil-4"}, headers={AUTH_HEADER: "t"})
    assert refilled.status_code == 200  # the second the 429 was held refilled one registration
    started = time.monotonic()
    CoordinatorClient(server.url, "t").register(RegisterRequest(name="patient"))  # honours Retry-After
    assert time.monotonic() - started > 0.5
