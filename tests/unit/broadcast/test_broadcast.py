"""The peer-assisted broadcast layer: manifest, chunk store, throttle, relay, planner, downloader.

Everything runs on loopback with small payloads and caps, so the whole file takes seconds.
"""

import asyncio
import json
import threading
import time

import numpy as np
import pytest
import torch
from broadcast_support import (
    FAST,
    KIB,
    TamperingStore,
    peers,  # noqa: F401 (fixtures)
    random_payload,
)
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from safetensors.numpy import save as save_numpy

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastCancelled, VersionSuperseded
from echo2.broadcast.manifest import Manifest, assemble, build_manifest
from echo2.broadcast.payload import CorruptPayload, load_parameters, serialize_parameters
from echo2.broadcast.relay import HELD_HEADER, add_broadcast_routes
from echo2.broadcast.suspects import SuspectSources
from echo2.broadcast.throttle import Throttle
from echo2.protocol import AUTH_HEADER
from echo2.units import MIB


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


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


#: The relay-chain timing test's numbers: payload M, every node's upload cap B, chunk size, depth.
#: One transfer takes M/B = 1 s (long against the ~0.2 s of fixed overhead seen on a busy machine).
CHAIN_BYTES, CHAIN_CAP, CHAIN_CHUNK, CHAIN_DEPTH = 4 * MIB, 4 * MIB, 128 * KIB, 3


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


def test_payload_helper_bytes_are_unchanged_without_dtype():
    model = tiny_model()
    assert serialize_parameters(model) == serialize_parameters(model, None)
