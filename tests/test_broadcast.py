"""The peer-assisted broadcast layer: manifest, chunk store, throttle, relay, planner, downloader.

Everything runs on loopback with small payloads and caps, so the whole file takes seconds.
"""

import asyncio
import json
import socket
import threading
import time

import numpy as np
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from safetensors.numpy import save as save_numpy

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastCancelled, BroadcastError, BroadcastTimeout, VersionSuperseded
from echo2.broadcast.manifest import Manifest, assemble, build_manifest
from echo2.broadcast.payload import CorruptPayload, load_parameters, serialize_parameters
from echo2.broadcast.relay import HELD_HEADER, RelayServer, add_broadcast_routes
from echo2.broadcast.suspects import SuspectSources
from echo2.broadcast.throttle import Throttle
from echo2.protocol import AUTH_HEADER
from echo2.units import MIB

KIB = 1024
FAST = {"stall_s": 1.0, "poll_s": 0.5, "timeout_s": 20.0}


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


def random_payload(nbytes: int, seed: int = 0) -> bytes:
    return save_numpy({"w": np.frombuffer(np.random.default_rng(seed).bytes(nbytes), dtype=np.float32)})


# ---------------------------------------------------------------------- manifest and payload
def test_manifest_round_trip_is_bit_identical():
    model = tiny_model()
    payload = serialize_parameters(model)
    manifest, chunks = build_manifest(payload, version=3, chunk_size=1000)
    assert manifest.dtype == "float32" and manifest.kind == "full" and manifest.total_bytes == len(payload)
    assert manifest.num_chunks == len(chunks) == -(-len(payload) // 1000)
    assert {t.name: (t.dtype, t.shape) for t in manifest.tensors} == {
        name: ("F32", list(p.shape)) for name, p in model.named_parameters()}
    copy = Manifest.model_validate_json(manifest.model_dump_json())  # as it travels
    fresh = tiny_model(seed=1)
    load_parameters(fresh, assemble(copy, chunks), copy.sha256)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), name


def test_bf16_payload_is_half_the_size_and_loads_back_into_float32():
    model = tiny_model()
    payload = serialize_parameters(model, "bfloat16")
    assert len(payload) < 0.6 * len(serialize_parameters(model))
    manifest, chunks = build_manifest(payload, version=0, chunk_size=512)
    assert manifest.dtype == "bfloat16" and {t.dtype for t in manifest.tensors} == {"BF16"}
    fresh = tiny_model(seed=1)
    load_parameters(fresh, assemble(manifest, chunks))
    for p, q in zip(model.parameters(), fresh.parameters()):
        assert q.dtype == torch.float32
        assert torch.equal(q, p.detach().to(torch.bfloat16).to(torch.float32))
        torch.testing.assert_close(q, p.detach(), rtol=2 ** -8, atol=0)


def test_lora_kind_is_just_another_tensor_set():
    adapter = save_numpy({"layers.0.q.lora_A": np.zeros((4, 16), np.float32),
                          "layers.0.q.lora_B": np.zeros((16, 4), np.float32)})
    manifest, chunks = build_manifest(adapter, version=1, chunk_size=64, kind="lora")
    assert manifest.kind == "lora" and [t.shape for t in manifest.tensors] == [[4, 16], [16, 4]]
    assert assemble(manifest, chunks) == adapter


def test_tampered_chunks_and_bad_inputs_are_rejected():
    payload = random_payload(10 * KIB)
    manifest, chunks = build_manifest(payload, version=7, chunk_size=KIB)
    tampered = list(chunks)
    tampered[2] = bytes([tampered[2][0] ^ 1]) + tampered[2][1:]
    with pytest.raises(CorruptPayload, match="v7 chunk 2: sha256 mismatch"):
        assemble(manifest, tampered)
    with pytest.raises(CorruptPayload, match="chunk 3: 10 bytes"):
        assemble(manifest, chunks[:3] + [chunks[3][:10]] + chunks[4:])
    with pytest.raises(CorruptPayload, match="chunks given"):
        assemble(manifest, chunks[:-1])
    with pytest.raises(CorruptPayload, match="safetensors"):
        build_manifest(b"definitely not safetensors", version=0)
    with pytest.raises(ValueError, match="dtype='bfloat16' but the payload holds"):
        build_manifest(payload, version=0, dtype="bfloat16")
    with pytest.raises(ValueError, match="chunk sizes add up"):
        Manifest(**{**manifest.model_dump(), "total_bytes": manifest.total_bytes + 1})


@pytest.mark.parametrize("field, value", [("version", "7"), ("total_bytes", True), ("version", 7.0)])
def test_a_relays_manifest_with_a_number_in_another_type_is_refused_not_coerced(field, value):
    """A manifest comes from an untrusted relay: ``"7"`` or ``true`` where a number belongs is an
    error naming the field (lax parsing took them as 7 and 1)."""
    manifest, _ = build_manifest(random_payload(4 * KIB), version=7, chunk_size=KIB)
    sent = json.dumps({**json.loads(manifest.model_dump_json()), field: value})
    with pytest.raises(ValidationError, match=field):
        Manifest.model_validate_json(sent)


# ---------------------------------------------------------------------- chunk store
def test_throttle_caps_the_total_rate_of_concurrent_senders():
    throttle = Throttle(4 * MIB)

    def send_one_mib():
        for _ in range(16):
            throttle.acquire(64 * KIB)

    threads = [threading.Thread(target=send_one_mib) for _ in range(2)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started  # 2 MiB at 4 MiB/s
    assert 0.4 < elapsed < 1.2, elapsed


def test_throttle_measures_the_achieved_upload_rate():
    throttle = Throttle(4 * 1024 * 1024)

    async def send(nbytes: int) -> None:
        async for _ in throttle.paced(b"x" * nbytes):
            pass

    assert throttle.measured_rate() is None  # nothing sent yet
    asyncio.run(send(2 * 1024 * 1024))
    assert throttle.measured_rate() == pytest.approx(4 * 1024 * 1024, rel=0.25)


def test_throttle_sends_bodies_in_order_at_the_capped_rate():
    throttle = Throttle(8 * MIB)

    async def receive(data, log):
        async for piece in throttle.paced(data):
            log.append(time.monotonic())

    async def main():
        first, second = [], []
        started = time.monotonic()
        await asyncio.gather(receive(bytes(512 * KIB), first), receive(bytes(512 * KIB), second))
        return started, first, second

    started, first, second = asyncio.run(main())
    assert len(first) == len(second) == 8
    assert first[-1] <= second[0] + 0.005  # one body after the other, not interleaved
    assert 0.1 < second[-1] - started < 0.5  # 1 MiB at 8 MiB/s (minus one slice of burst)
    unlimited = Throttle(None)
    started = time.monotonic()
    unlimited.acquire(100 * MIB)
    assert time.monotonic() - started < 0.05


# ---------------------------------------------------------------------- relay routes
def test_routes_on_a_plain_app_auth_long_poll_and_refusals():
    payload = random_payload(4 * KIB)
    store = ChunkStore()
    manifest = store.publish(5, payload, chunk_size=KIB)
    app = FastAPI()
    add_broadcast_routes(app, store, token="secret", max_wait_s=0.2)
    client = TestClient(app)
    auth = {AUTH_HEADER: "secret"}
    assert client.get("/v1/broadcast/5/manifest").status_code == 401
    assert client.get("/v1/broadcast/5/manifest", headers={AUTH_HEADER: "nope"}).json()["code"] == "unauthorized"
    assert Manifest.model_validate_json(client.get("/v1/broadcast/5/manifest", headers=auth).content) == manifest
    got = client.get("/v1/broadcast/5/chunks/1", headers=auth)
    assert got.status_code == 200 and got.content == payload[KIB:2 * KIB]
    assert client.get("/v1/broadcast/5/chunks/99", headers=auth).json()["code"] == "no_such_chunk"
    started = time.monotonic()
    unknown = client.get("/v1/broadcast/6/chunks/0", params={"wait_s": 10}, headers=auth)  # capped at 0.2s
    assert unknown.status_code == 404 and unknown.json()["code"] == "unknown" and time.monotonic() - started < 2
    store.publish(6, random_payload(KIB, 6), chunk_size=KIB)
    store.publish(7, random_payload(KIB, 7), chunk_size=KIB)
    evicted = client.get("/v1/broadcast/5/chunks/0", params={"wait_s": 10}, headers=auth)
    assert evicted.status_code == 404 and evicted.json()["code"] == "evicted"
    partial, _ = build_manifest(random_payload(2 * KIB, 8), version=8, chunk_size=KIB)
    store.put_manifest(partial)
    not_yet = client.get("/v1/broadcast/8/chunks/1", params={"wait_s": 0.05}, headers=auth)
    assert not_yet.status_code == 503 and not_yet.json()["code"] == "not_yet" and not_yet.headers[HELD_HEADER] == "0"
    status = client.get("/v1/broadcast/status", headers=auth).json()
    v7 = store.manifest(7).num_chunks
    assert status == {"versions": {"7": {"held": v7, "chunks": v7}, "8": {"held": 0, "chunks": partial.num_chunks}}}


# ---------------------------------------------------------------------- end to end on loopback
class Peer:
    """A node as a worker will run it: a store, a capped relay, a downloader thread."""

    def __init__(self, cap, store=None):
        self.store = store or ChunkStore()
        self.relay = RelayServer(self.store, throttle=Throttle(cap)).start()
        self.url, self.result, self.error = self.relay.url, None, None
        self.cancel = threading.Event()

    def fetch(self, version, sources, **options):
        def run():
            try:
                self.result = fetch_version(version, sources, self.store, cancel=self.cancel, **{**FAST, **options})
            except BaseException as error:  # noqa: BLE001 - inspected by the test
                self.error = error

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def kill(self):
        self.cancel.set()
        self.relay.stop(timeout_s=3, abort=True)


@pytest.fixture
def peers():
    started = []

    def make(cap, store=None):
        started.append(Peer(cap, store))
        return started[-1]

    yield make
    for peer in started:
        peer.cancel.set()
        peer.relay.stop(timeout_s=3)


#: The relay-chain timing test's numbers: payload M, every node's upload cap B, chunk size, depth.
#: One transfer takes M/B = 1 s (long against the ~0.2 s of fixed overhead seen on a busy machine).
CHAIN_BYTES, CHAIN_CAP, CHAIN_CHUNK, CHAIN_DEPTH = 4 * MIB, 4 * MIB, 128 * KIB, 3
CHAIN_TRANSFER_S = CHAIN_BYTES / CHAIN_CAP
#: Pipelined, the last node finishes after M/B + (depth - 1) * chunk/B ~ 1.06 s; store-and-forward
#: (each node forwards only once it holds the whole payload) after depth * M/B = 3 s, and even ONE
#: store-and-forward hop takes 2 * M/B. The bound sits between, with ~0.7 s for a busy 2-core machine.
CHAIN_BOUND_S = 1.8 * CHAIN_TRANSFER_S


def relay_chain(peers, store_and_forward=False):
    """Root -> CHAIN_DEPTH capped relays, each fetching from its parent (falling back up the chain).
    Returns the payload, the chain, the URLs and the seconds until the last node held everything.
    ``store_and_forward``: the broken variant, where a node starts only once its parent is complete."""
    payload = random_payload(CHAIN_BYTES)
    root = peers(CHAIN_CAP)
    root.store.publish(1, payload, chunk_size=CHAIN_CHUNK)
    chain = [peers(CHAIN_CAP) for _ in range(CHAIN_DEPTH)]
    urls = [root.url] + [p.url for p in chain]
    started = time.monotonic()
    for i, peer in enumerate(chain):
        # A 2 s long-poll: a parent on a busy machine may take over the default 0.5 s to get the
        # manifest itself, and the child would then (rightly) fail over to its grandparent.
        peer.fetch(1, urls[i::-1], poll_s=2.0)  # [parent, grandparent, ..., root]
        if store_and_forward:
            peer.thread.join(20)
    for peer in chain:
        peer.thread.join(20)
        assert peer.error is None, peer.error
    return payload, chain, urls, time.monotonic() - started


@pytest.mark.integration
def test_chain_of_three_relays_delivers_identical_bytes(peers):
    """Every node gets the exact bytes from its own parent, and the chain is pipelined: the last
    node is done well before depth * M/B (what a chain forwarding only whole payloads takes, see
    the next test), yet not faster than one capped transfer allows (a cap that is not enforced)."""
    payload, chain, urls, elapsed = relay_chain(peers)
    for i, peer in enumerate(chain):
        assert peer.result.payload == payload and peer.result.stats.failovers == []
        assert peer.result.stats.bytes_by_source == {urls[i]: len(payload)}  # all from its parent
    assert 0.9 * CHAIN_TRANSFER_S <= elapsed < CHAIN_BOUND_S, (elapsed, CHAIN_TRANSFER_S)


@pytest.mark.integration
def test_a_store_and_forward_chain_would_miss_the_pipelining_bound(peers):
    """The control for the test above: the same chain with each node starting only once its parent
    holds the whole payload takes ~depth * M/B, so the pipelining bound does tell the two apart."""
    payload, chain, _, elapsed = relay_chain(peers, store_and_forward=True)
    assert all(peer.result.payload == payload for peer in chain)
    assert elapsed >= CHAIN_BOUND_S, (elapsed, CHAIN_BOUND_S)


def test_a_version_the_parent_skipped_is_not_pulled_from_the_learner(peers):
    """A child asking its parent for v4 after the parent went on to v5 stops at once and fetches
    nothing from the learner: pulling the outdated version from the root put the child on the
    learner's capped uplink beside the chain's head, which halved both transfers and kept the
    child behind for the rest of a run (a held-out run at 8 Mbit/s)."""
    root, parent = peers(CHAIN_CAP), peers(CHAIN_CAP)
    for version in (4, 5):
        root.store.publish(version, random_payload(4 * KIB, seed=version), chunk_size=KIB)
    parent.store.publish(5, random_payload(4 * KIB, seed=5), chunk_size=KIB)
    child = ChunkStore()
    started = time.monotonic()
    with pytest.raises(VersionSuperseded, match="went on to v5"):
        fetch_version(4, [parent.url, root.url], child, **FAST)
    assert time.monotonic() - started < 1 and child.manifest(4) is None and child.held(4) == 0
    assert list(fetch_version(5, [parent.url, root.url], child, **FAST).stats.bytes_by_source) == [parent.url]


@pytest.mark.integration
def test_killing_a_middle_relay_mid_broadcast_loses_no_verified_chunk(peers):
    payload, cap = random_payload(3 * MIB), 2 * MIB  # ~1.5 s per transfer: time to kill one midway
    root = peers(cap)
    root.store.publish(1, payload, chunk_size=128 * KIB)
    a, b, c = peers(cap), peers(cap), peers(cap)
    a.fetch(1, [root.url])
    b.fetch(1, [a.url, root.url])
    c.fetch(1, [b.url, a.url, root.url])
    deadline = time.monotonic() + 10
    while b.store.held(1) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    held_by_b = b.store.held(1)
    assert 6 <= held_by_b < 20
    a.kill()
    for peer in (b, c):
        peer.thread.join(20)
        assert peer.error is None, peer.error
        assert peer.result.payload == payload and peer.store.complete(1)
    stats = b.result.stats
    assert stats.bytes_by_source[a.url] >= held_by_b * 128 * KIB - 2 * 128 * KIB  # kept what a had sent
    assert stats.bytes_by_source[root.url] > 0 and any(a.url in line for line in stats.failovers)
    assert sum(stats.bytes_by_source.values()) == len(payload)  # every chunk stored once: nothing fetched twice
    a.thread.join(5)
    assert isinstance(a.error, (BroadcastCancelled, BroadcastError)) or a.result is not None


class TamperingStore(ChunkStore):
    """Serves chunk 3 with one bit flipped (a faulty or malicious relay)."""

    async def aget_chunk(self, version, index, wait_s=0.0):
        data = await super().aget_chunk(version, index, wait_s)
        return bytes([data[0] ^ 1]) + data[1:] if data is not None and index == 3 else data


def test_corrupt_chunk_is_refetched_from_the_next_source(peers):
    payload = random_payload(1 * MIB)
    root, liar = peers(None), peers(None, TamperingStore())
    for peer in (root, liar):
        peer.store.publish(1, payload, chunk_size=128 * KIB)
    receiver = peers(None).fetch(1, [liar.url, root.url])
    receiver.thread.join(20)
    assert receiver.error is None, receiver.error
    stats = receiver.result.stats
    assert receiver.result.payload == payload
    assert any("chunk 3" in line and "corrupt" in line for line in stats.failovers)
    assert stats.chunks_by_source[liar.url] >= 3 and stats.chunks_by_source[root.url] >= 1


class ClearedMidFetchStore(ChunkStore):
    """A worker's store that starts over (it registered again) while a chunk is on its way."""

    def put_chunk(self, version, index, data):
        self.clear()
        return super().put_chunk(version, index, data)


def test_a_store_cleared_under_a_fetch_cancels_it_with_a_broadcast_error(peers):
    """A rejoining worker clears its store while its background fetch is in flight: the fetch must
    end as cancelled (which the fetcher handles), not with a lookup error that kills its thread."""
    payload = random_payload(256 * KIB)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=64 * KIB)
    receiver = peers(None, ClearedMidFetchStore()).fetch(1, [root.url])
    receiver.thread.join(10)
    assert isinstance(receiver.error, BroadcastCancelled), receiver.error
    assert "dropped from this node's store" in str(receiver.error)


@pytest.mark.integration
def test_a_source_that_never_answers_is_dropped_after_the_stall_budget(peers):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections in the kernel, never answers
    payload = random_payload(256 * KIB)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=64 * KIB)
    try:
        started = time.monotonic()
        receiver = peers(None).fetch(1, [f"http://127.0.0.1:{silent.getsockname()[1]}", root.url],
                                     stall_s=0.3, poll_s=0.2)
        receiver.thread.join(10)
        assert receiver.error is None, receiver.error
        assert receiver.result.payload == payload and time.monotonic() - started < 5
        assert any("no answer" in line or "stalled" in line for line in receiver.result.stats.failovers)
    finally:
        silent.close()


@pytest.mark.integration
def test_a_relay_that_stalled_is_skipped_by_the_next_fetches_until_its_suspicion_lapses():
    """A silent partition lasts longer than one version: the next version's fetch goes straight to
    the learner instead of spending the stall budget on the same relay again."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    relay_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    root = ChunkStore()
    for version in (1, 2):
        root.publish(version, random_payload(64 * KIB, version), chunk_size=16 * KIB)
    now = [0.0]
    suspects = SuspectSources(suspect_s=30.0, clock=lambda: now[0])
    try:
        with RelayServer(root) as learner:
            first = fetch_version(1, [relay_url, learner.url], ChunkStore(), stall_s=0.3, poll_s=0.2, suspects=suspects)
            assert first.stats.failovers and relay_url not in first.stats.chunks_by_source
            # A stall budget long enough that a loaded machine's slow learner thread never trips it, and
            # that a try at the silent relay could not hide in: had it been tried, it would cost 5 s.
            started = time.monotonic()
            second = fetch_version(2, [relay_url, learner.url], ChunkStore(), stall_s=5.0, poll_s=0.2, suspects=suspects)
            assert second.stats.failovers == [] and second.stats.manifest_source == learner.url
            assert relay_url not in second.stats.chunks_by_source
            assert time.monotonic() - started < 5.0  # no stall budget spent on the silent relay
    finally:
        silent.close()
    assert suspects.chain([relay_url, "http://learner"]) == ["http://learner"]
    now[0] = 31.0  # the suspicion lapsed: the relay is tried first again
    assert suspects.chain([relay_url, "http://learner"]) == [relay_url, "http://learner"]
    suspects.failed("http://learner/")  # the learner, the last resort, is never left out
    assert suspects.chain(["http://learner"]) == ["http://learner"]


def test_a_relay_that_fails_again_and_again_is_skipped_longer_each_time_until_it_has_been_quiet_a_while():
    """A relay that takes connections and sends nothing would cost every fetch a stall budget each time
    its suspicion lapsed; each failure soon after the last doubles its time out, up to ``SLOW_S``."""
    now = [0.0]
    suspects = SuspectSources(suspect_s=30.0, clock=lambda: now[0])
    relay, chain = "http://relay", ["http://relay", "http://learner"]
    lapses = []
    for _ in range(6):
        suspects.failed(relay)
        suspects.failed(relay)  # another request of the same fetch: one failure
        started = now[0]
        while suspects.chain(chain) != chain:
            now[0] += 1.0
        lapses.append(now[0] - started)
        now[0] += 20.0  # the next version's fetch tries it again a while after its time out ended
    assert lapses == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]  # capped at SLOW_S
    now[0] += 301.0  # used for longer than SLOW_S since its time out without failing: a healed link, 30 s again
    suspects.chain(chain)
    suspects.failed(relay)
    started = now[0]
    while suspects.chain(chain) != chain:
        now[0] += 1.0
    assert now[0] - started == 30.0


@pytest.mark.integration
def test_errors_are_bounded_and_say_what_failed():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(BroadcastTimeout, match=r"v4 not complete within 0.6s .*ConnectError"):
        fetch_version(4, [dead], ChunkStore(), timeout_s=0.6, stall_s=0.3, poll_s=0.1)
    assert time.monotonic() - started < 3

    store = ChunkStore()
    for version in (1, 2, 3):
        store.publish(version, random_payload(KIB, version), chunk_size=KIB)
    with RelayServer(store) as learner:
        with pytest.raises(BroadcastError, match="v1 is no longer served"):
            fetch_version(1, [learner.url], ChunkStore(), **FAST)
        with pytest.raises(BroadcastTimeout, match="not the announced"):
            fetch_version(3, [learner.url], ChunkStore(), expected_sha256="0" * 64, timeout_s=0.5, stall_s=0.3,
                          poll_s=0.1)
        resumed = ChunkStore()
        resumed.put_manifest(store.manifest(3))
        resumed.put_chunk(3, 0, store.get_chunk(3, 0))
        result = fetch_version(3, [learner.url], resumed, **FAST)
        assert result.stats.resumed_chunks == 1 and result.payload == store.payload(3)


def test_payload_helper_bytes_are_unchanged_without_dtype():
    model = tiny_model()
    assert serialize_parameters(model) == serialize_parameters(model, None)
