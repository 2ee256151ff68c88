"""The wire, hardened (issue 18): credentials checked before a body is read, bodies capped while
they stream, TLS with pinned or CA-checked certificates, relay URLs checked, a broadcast
credential that is worth nothing but chunks, and no credential in files others can read."""

import io
import logging
import socket
import time

import httpx
import pytest
import torch
from attackers.wire import chunked_body  # noqa: E402
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from state_support import make_state
from tls_support import self_signed

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.publisher import Publisher
from echo2.broadcast.relay import RelayServer
from echo2.broadcast.topology import plan_tree
from echo2.config import BroadcastConfig, dump_config, load_config
from echo2.coordinator.app import MAX_BODY_BYTES, create_app
from echo2.coordinator.server import CoordinatorServer
from echo2.net.guard import Door, Refusal, broadcast_credential
from echo2.net.redact import REDACTED, SESSION_CREDENTIAL, redact_logs, remove_redaction
from echo2.net.serving import BackgroundServer
from echo2.net.tls import certificate_fingerprint
from echo2.protocol import AUTH_HEADER, RegisterRequest
from echo2.report.data import redacted_config_text
from echo2.rollout.client import CoordinatorClient, CoordinatorUntrusted
from echo2.rollout.options import WorkerOptions

MIB = 1024 * 1024
RUN_TOKEN = "t"  # make_state's


class CountingBody:
    """An ASGI app wrapped so as to count the body bytes the server hands it (what it read)."""

    def __init__(self, app) -> None:
        self.app, self.body_bytes = app, 0

    async def __call__(self, scope, receive, send) -> None:
        async def counted():
            message = await receive()
            self.body_bytes += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


@pytest.fixture()
def served():
    """The coordinator app with the learner's chunk routes, on a real uvicorn server (loopback);
    ``server.counted.body_bytes``: body bytes the server read."""
    state = make_state(staleness=1, planner=lambda nodes, incumbent: plan_tree(nodes, incumbent=incumbent))
    publisher = Publisher(BroadcastConfig(chunk_mib=0.001), keep_versions=3, token=RUN_TOKEN)
    app = create_app(state, lease_wait_s=0)
    publisher.mount(app)
    counted = CountingBody(app)
    server = CoordinatorServer(counted, "127.0.0.1", 0)
    server.counted = counted
    server.start(10)
    yield state, publisher, server
    server.stop()
    publisher.close()


def send_chunked(port: int, path: str, headers: dict[str, str], total: int) -> tuple[int, int]:
    """POST ``total`` bytes chunked, stopping once answered (the attack bench's sender):
    (HTTP status, body bytes sent)."""
    sent = chunked_body(f"http://127.0.0.1:{port}", path, headers, total)
    assert sent["status"] is not None, f"no answer after sending {sent['body_bytes_sent']} bytes"
    return sent["status"], sent["body_bytes_sent"]


# ---------------------------------------------------------------------- authenticate before the body
def test_no_credential_is_401_before_validation():
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0))
    for path in ("/v1/lease", "/v1/submit", "/v1/heartbeat", "/v1/deregister"):
        for body in ({}, {"version": -1}, None):
            response = client.post(path, json=body)
            assert response.status_code == 401, (path, body, response.text)
            assert response.json()["code"] == "unauthorized"
    assert client.post("/v1/register", json={"nonsense": 1}).status_code == 401
    assert client.post("/v1/lease", json={}, headers={AUTH_HEADER: RUN_TOKEN}).status_code == 401  # not a session
    assert client.get("/v1/version").status_code == 401
    assert client.get("/v1/health").status_code == 200


def test_session_credentials_are_looked_up_by_id_and_their_secret_compared():
    state = make_state(staleness=1)
    record = state.members.register("w")
    worker_id, _, secret = record.session_token.partition(".")
    assert worker_id == record.worker_id and len(secret) >= 32
    assert SESSION_CREDENTIAL.fullmatch(record.session_token)  # what the log filter redacts
    registry = state.registry
    assert registry.knows(record.session_token) is record
    flipped = secret[:-1] + ("y" if secret[-1] == "x" else "x")  # differs in its last character only
    for forged in (worker_id, f"{worker_id}.", f"{worker_id}.{flipped}", f"other.{secret}", "", None):
        assert registry.knows(forged) is None


def test_anonymous_chunked_body_is_refused_unread(served):
    _, _, server = served
    status, sent = send_chunked(server.port, "/v1/submit", {}, total=60 * MIB)
    assert status == 401
    assert server.counted.body_bytes == 0  # refused before the app read a byte
    assert sent < 60 * MIB  # and the answer came before the client could finish sending


def test_a_door_checks_its_own_credential_before_a_body_byte_and_caps_its_own_bodies():
    """The training service's API key and the gateway's episode keys are checked as the workers'
    credentials are: a forged one is answered 401 before the body is read (a 15 MB chat body had
    been parsed first), a good one past its door's cap 413."""
    def check(path, headers):
        return None if headers.get("x-api-key") == "good" else Refusal(401, "wrong key", "unauthorized")

    app = create_app(make_state(staleness=1), lease_wait_s=0, doors={"/door/": Door(check, 64 * 1024)})

    @app.post("/door/echo")
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"bytes": len(await request.body())})

    counted = CountingBody(app)
    server = CoordinatorServer(counted, "127.0.0.1", 0)
    server.start(10)
    try:
        status, sent = send_chunked(server.port, "/door/echo", {"X-API-Key": "forged"}, total=15 * MIB)
        assert status == 401 and counted.body_bytes == 0 and sent < 15 * MIB
        status, _ = send_chunked(server.port, "/door/echo", {"X-API-Key": "good"}, total=15 * MIB)
        assert status == 413 and counted.body_bytes <= 64 * 1024 + 64 * 1024  # cut within a chunk of the cap
        small = httpx.post(f"http://127.0.0.1:{server.port}/door/echo", content=b"x" * 1000,
                           headers={"X-API-Key": "good"}, timeout=10)
        assert small.status_code == 200 and small.json() == {"bytes": 1000}
    finally:
        server.stop()


def test_oversize_chunked_body_is_cut_at_the_limit(served):
    state, _, server = served
    session = state.members.register("w").session_token
    status, sent = send_chunked(server.port, "/v1/submit", {AUTH_HEADER: session}, total=100 * MIB)
    assert status == 413
    assert MAX_BODY_BYTES < server.counted.body_bytes < MAX_BODY_BYTES + MIB  # read up to the limit, no further
    assert sent < 100 * MIB  # the client did not have to send it all (kernel buffers took some)
    # an announced oversize body is refused on its Content-Length alone, before a byte of it is sent
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"POST /v1/submit HTTP/1.1\r\nHost: x\r\n{AUTH_HEADER}: {session}\r\n"
                     f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")


# ---------------------------------------------------------------------- relay URLs, broadcast credential
@pytest.mark.parametrize("relay_url", ["http://u:p@10.0.0.1:7000", "http://10.0.0.1:7000/steal", "http://10.0.0.1",
                                       "http://10.0.0.1:7000?x=1", "http://10.0.0.1:7000#f", "file:///etc/passwd",
                                       "gopher://10.0.0.1:70", "http://10.0.0.1:0", "http://a b:1"])
def test_bad_relay_urls_are_refused_at_registration(relay_url):
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0))
    response = client.post("/v1/register", json={"name": "w", "relay_url": relay_url}, headers={AUTH_HEADER: RUN_TOKEN})
    assert response.status_code == 422 and "relay_url must be http(s)://host:port" in response.json()["detail"]
    good = client.post("/v1/register", json={"name": "w", "relay_url": "https://relay.example:7000"},
                       headers={AUTH_HEADER: RUN_TOKEN})
    assert good.status_code == 200


def test_a_tls_run_takes_only_https_relays():
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0, https_relays_only=True))
    plain = client.post("/v1/register", json={"name": "w", "relay_url": "http://10.0.0.1:7000"},
                        headers={AUTH_HEADER: RUN_TOKEN})
    assert plain.status_code == 422 and "https" in plain.json()["detail"]
    for relay_url in ("https://10.0.0.1:7000", None):
        assert client.post("/v1/register", json={"name": "w", "relay_url": relay_url},
                           headers={AUTH_HEADER: RUN_TOKEN}).status_code == 200


def test_chunk_routes_take_only_the_broadcast_credential(served):
    state, publisher, server = served
    with httpx.Client(base_url=server.url) as http:
        reply = http.post("/v1/register", json={"name": "w"}, headers={AUTH_HEADER: RUN_TOKEN}).json()
        assert reply["broadcast_token"] == broadcast_credential(RUN_TOKEN) != RUN_TOKEN
        published = publisher.publish(1, torch.nn.Linear(4, 4))
        state.publish(published)
        for wrong in (RUN_TOKEN, reply["session_token"], None):
            refused = http.get("/v1/broadcast/1/manifest", headers={AUTH_HEADER: wrong} if wrong else {})
            assert refused.status_code == 401, wrong
        assert http.get("/v1/broadcast/1/manifest", headers={AUTH_HEADER: reply["broadcast_token"]}).status_code == 200
        # and the broadcast credential opens nothing else
        assert http.get("/v1/version", headers={AUTH_HEADER: reply["broadcast_token"]}).status_code == 401
        assert http.post("/v1/register", json={"name": "x"},
                         headers={AUTH_HEADER: reply["broadcast_token"]}).status_code == 401


def test_a_relay_refuses_the_run_token_and_takes_the_broadcast_credential():
    store = ChunkStore()
    with RelayServer(store, token=broadcast_credential("run-secret")) as relay, httpx.Client() as http:
        status = f"{relay.url}/v1/broadcast/status"
        assert http.get(status, headers={AUTH_HEADER: "run-secret"}).status_code == 401
        assert http.get(status).status_code == 401
        assert http.get(status, headers={AUTH_HEADER: broadcast_credential("run-secret")}).status_code == 200
        # a body on a relay is refused before anything reads it: only the headers are sent, the
        # answer comes anyway (sending the body too would race the server's close with a reset)
        port = int(relay.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"GET /v1/broadcast/status HTTP/1.1\r\nHost: x\r\n{AUTH_HEADER}: "
                         f"{broadcast_credential('run-secret')}\r\nContent-Length: 4096\r\n\r\n".encode())
            assert sock.recv(64).startswith(b"HTTP/1.1 413")
    store.close()


def test_peers_send_a_relay_nothing_but_the_broadcast_credential(served):
    """One registered worker names a relay URL pointing at its own server; a peer sent there
    presents the broadcast credential only, never the run token or its session credential."""
    from echo2.rollout.worker import RolloutWorker

    state, publisher, server = served
    seen: list[str | None] = []
    spy = FastAPI()

    @spy.get("/{path:path}")
    def collect(request: Request, path: str) -> JSONResponse:  # noqa: ARG001
        seen.append(request.headers.get(AUTH_HEADER))
        return JSONResponse({"detail": "not here", "code": "gone"}, status_code=404)

    spy_server = BackgroundServer(spy, "127.0.0.1", 0, what="spy")
    spy_server.start(10)
    victim = RolloutWorker(server.url, RUN_TOKEN, relay=None)
    try:
        with httpx.Client(base_url=server.url) as http:
            attacker = http.post("/v1/register", json={"name": "attacker", "relay_url": spy_server.url,
                                                       "upload_bytes_per_s": 1e9},
                                 headers={AUTH_HEADER: RUN_TOKEN})
            assert attacker.status_code == 200
        victim.client.register(RegisterRequest(name="victim"))
        victim.weights.spec = state.spec
        published = publisher.publish(1, torch.nn.Linear(4, 4))
        sha = published.sha256
        state.publish(published)
        fetched = victim.weights.fetch_newest(-1)
        assert fetched is not None and fetched[0] == 1 and fetched[2] == sha
    finally:
        victim.client.close()
        victim.weights.close()
        spy_server.stop()
    assert seen, "the victim never asked the attacker's relay (the plan did not chain them)"
    assert set(seen) == {broadcast_credential(RUN_TOKEN)}


# ---------------------------------------------------------------------- TLS
def test_tls_coordinator_with_pinned_and_ca_checked_workers(tmp_path):
    cert, key = self_signed(tmp_path)
    state = make_state(staleness=1)
    server = CoordinatorServer(create_app(state, lease_wait_s=0), "127.0.0.1", 0, certfile=cert, keyfile=key)
    server.start(10)
    try:
        assert server.url.startswith("https://")
        pin = certificate_fingerprint(cert)
        for verify in ({"pin_sha256": [pin]}, {"pin_sha256": [":".join(pin[i:i + 2] for i in range(0, 64, 2))]},
                       {"ca_file": cert}):
            options = WorkerOptions(coordinator=server.url, token=RUN_TOKEN, **verify)
            client = CoordinatorClient(server.url, RUN_TOKEN, verify=options.tls_verify(), give_up_after_s=5)
            assert client.register(RegisterRequest(name="w")).broadcast_token == broadcast_credential(RUN_TOKEN)
            client.close()
        other, _ = self_signed(tmp_path, "other")
        for verify in ({"pin_sha256": ["ab" * 32]}, {"ca_file": other}):
            options = WorkerOptions(coordinator=server.url, token=RUN_TOKEN, **verify)
            client = CoordinatorClient(server.url, RUN_TOKEN, verify=options.tls_verify(), give_up_after_s=30)
            started = time.monotonic()
            with pytest.raises(CoordinatorUntrusted, match="failed TLS verification") as refused:
                client.register(RegisterRequest(name="w"))
            assert time.monotonic() - started < 5  # not retried: no credential goes to an impostor
            if "pin_sha256" in verify:
                assert f"presented a certificate with SHA-256 {pin}" in str(refused.value)
            client.close()
        assert state.books.counters.workers_registered == 3
        with pytest.raises(ValueError, match="not https"):
            WorkerOptions(coordinator="http://127.0.0.1:1", token=RUN_TOKEN, pin_sha256=[pin])
    finally:
        server.stop()


# ---------------------------------------------------------------------- credentials out of shared files
def test_config_yaml_and_report_never_show_the_token():
    secret = "f00dfeedc0ffee0123456789abcdef42"
    text = dump_config(load_config(overrides=[f"coordinator.token={secret}"]))
    assert secret not in text and f"token: {REDACTED}" in text
    # a config.yaml written before the token was redacted there: the report still hides it
    old = text.replace(REDACTED, secret)
    assert secret in old and secret not in redacted_config_text(old)


def test_log_filter_redacts_credentials():
    state = make_state(staleness=1)
    session = state.members.register("w").session_token
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    redaction = redact_logs("s3cret-run-token", broadcast_credential("s3cret-run-token"))
    try:
        log = logging.getLogger("echo2.test")
        log.warning("token %s session %s broadcast %s", "s3cret-run-token", session,
                    broadcast_credential("s3cret-run-token"))
        try:
            raise RuntimeError(f"failed with s3cret-run-token and {session}")
        except RuntimeError:
            log.exception("boom")
    finally:
        remove_redaction(redaction)
        logging.getLogger().removeHandler(handler)
    written = stream.getvalue()
    assert "s3cret-run-token" not in written and session not in written
    assert broadcast_credential("s3cret-run-token") not in written
    assert written.count(REDACTED) >= 5 and "RuntimeError" in written
