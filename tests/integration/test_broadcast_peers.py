"""The peer-assisted broadcast layer: manifest, chunk store, throttle, relay, planner, downloader.

Everything runs on loopback with small payloads and caps, so the whole file takes seconds.
"""

import socket
import time

import pytest
from broadcast_support import (
    FAST,
    KIB,
    peers,  # noqa: F401 (fixtures)
    random_payload,
)

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastCancelled, BroadcastError, BroadcastTimeout
from echo2.broadcast.relay import RelayServer
from echo2.broadcast.suspects import SuspectSources
from echo2.units import MIB

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


def test_chain_of_three_relays_delivers_identical_bytes(peers):
    """Every node gets the exact bytes from its own parent, and the chain is pipelined: the last
    node is done well before depth * M/B (what a chain forwarding only whole payloads takes, see
    the next test), yet not faster than one capped transfer allows (a cap that is not enforced)."""
    payload, chain, urls, elapsed = relay_chain(peers)
    for i, peer in enumerate(chain):
        assert peer.result.payload == payload and peer.result.stats.failovers == []
        assert peer.result.stats.bytes_by_source == {urls[i]: len(payload)}  # all from its parent
    assert 0.9 * CHAIN_TRANSFER_S <= elapsed < CHAIN_BOUND_S, (elapsed, CHAIN_TRANSFER_S)


def test_a_store_and_forward_chain_would_miss_the_pipelining_bound(peers):
    """The control for the test above: the same chain with each node starting only once its parent
    holds the whole payload takes ~depth * M/B, so the pipelining bound does tell the two apart."""
    payload, chain, _, elapsed = relay_chain(peers, store_and_forward=True)
    assert all(peer.result.payload == payload for peer in chain)
    assert elapsed >= CHAIN_BOUND_S, (elapsed, CHAIN_BOUND_S)


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
