"""The chunk store every node keeps: long-polls, verification, eviction, and refusing versions
that will never come (so relays never wait on each other). Pure in-process, seconds."""

import asyncio
import threading
import time

import pytest
from broadcast_support import random_payload

from echo2.broadcast.chunk_store import ChunkStore, UnknownVersion, VersionEvicted
from echo2.broadcast.manifest import build_manifest
from echo2.broadcast.payload import CorruptPayload

KIB = 1024


def test_store_long_polls_verifies_and_evicts():
    payload = random_payload(8 * KIB)
    manifest, chunks = build_manifest(payload, version=1, chunk_size=KIB)
    store = ChunkStore(keep=2)
    assert store.get_chunk(1, 0, wait_s=0.05) is None  # not known yet: waits, then times out
    store.put_manifest(manifest)
    assert store.missing(1) == list(range(manifest.num_chunks)) and not store.complete(1)
    with pytest.raises(CorruptPayload, match="v1 chunk 0"):
        store.put_chunk(1, 0, chunks[1])
    threading.Timer(0.1, store.put_chunk, args=(1, 0, chunks[0])).start()
    started = time.monotonic()
    assert store.get_chunk(1, 0, wait_s=5) == chunks[0]
    assert 0.05 < time.monotonic() - started < 2
    for index, chunk in enumerate(chunks):
        store.put_chunk(1, index, chunk)
    assert store.complete(1) and store.missing(1) == [] and store.payload(1) == payload
    with pytest.raises(IndexError):
        store.get_chunk(1, manifest.num_chunks)

    # a waiter on a version that gets evicted is woken with the reason, not left to time out
    partial, _ = build_manifest(random_payload(KIB, seed=2), version=2, chunk_size=KIB)
    store.put_manifest(partial)  # held: v1 (complete) and v2 (no chunks yet)
    outcome = []

    def wait_on_v2_chunk():
        try:
            store.get_chunk(2, 0, wait_s=5)
        except VersionEvicted as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait_on_v2_chunk)
    waiter.start()
    time.sleep(0.1)
    store.publish(3, random_payload(KIB, seed=3), chunk_size=KIB)  # evicts v1
    store.publish(4, random_payload(KIB, seed=4), chunk_size=KIB)  # evicts v2
    waiter.join(2)
    assert outcome and "v2 was evicted" in str(outcome[0])
    assert store.versions() == [3, 4]
    with pytest.raises(VersionEvicted):
        store.put_manifest(manifest)
    with pytest.raises(UnknownVersion):
        store.missing(5)


def test_a_version_the_node_skipped_is_refused_at_once_not_waited_for():
    """A relay that went on to v5 will never hold v4: a child asking for v4 must move on at once
    (it used to wait out its stall timeout, 24 s, on such a parent)."""
    store = ChunkStore(keep=3)
    store.publish(3, random_payload(KIB, seed=3), chunk_size=KIB)
    outcome = []

    def wait_on_v4():
        try:
            store.get_manifest(4, wait_s=5)
        except VersionEvicted as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait_on_v4)
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()  # v4 may still come: the node holds nothing newer
    started = time.monotonic()
    manifest, _ = build_manifest(random_payload(KIB, seed=5), version=5, chunk_size=KIB)
    store.put_manifest(manifest)  # the node starts fetching v5, skipping v4
    waiter.join(2)
    assert outcome and "v4 was skipped (this node went on to v5)" in str(outcome[0])
    assert time.monotonic() - started < 1
    with pytest.raises(VersionEvicted, match="skipped"):
        store.get_chunk(4, 0, wait_s=5)
    assert store.get_manifest(3) is not None and store.manifest(4) is None  # held and plain lookups unchanged


def test_a_relay_setting_out_for_a_newer_version_refuses_older_waiters_before_its_manifest():
    """Two relays on different versions must not long-poll each other: one fetching v13 (its
    manifest not in yet) tells a child asking v12 at once, and a partial v12 it abandoned answers
    the chunks it holds and refuses the rest (the 4-worker chain's 24.5 s stalls)."""
    store = ChunkStore(keep=3)
    outcome = []

    def wait_on(version):
        try:
            store.get_manifest(version, wait_s=5)
        except VersionEvicted as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait_on, args=(12,))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()
    started = time.monotonic()
    store.receive(13)
    waiter.join(2)
    assert outcome and "v12 was skipped (this node went on to v13)" in str(outcome[0])
    assert time.monotonic() - started < 1
    store.receive(11)  # older than what it set out for: changes nothing
    with pytest.raises(VersionEvicted, match="went on to v13"):
        store.get_manifest(12, wait_s=5)
    # a partial v13 abandoned for v14: held chunks are served, missing ones refused at once
    manifest, chunks = build_manifest(random_payload(2 * KIB, seed=13), version=13, chunk_size=KIB)
    store.put_manifest(manifest)
    store.put_chunk(13, 0, chunks[0])
    store.receive(14)
    assert store.get_chunk(13, 0, wait_s=5) == chunks[0]
    started = time.monotonic()
    with pytest.raises(VersionEvicted, match="chunk 1 will not come"):
        store.get_chunk(13, 1, wait_s=5)
    assert time.monotonic() - started < 1
    # after a resume version numbers start over: a cleared store waits for v12 again
    store.clear()
    assert store.versions() == [] and store.get_manifest(12, wait_s=0.05) is None


def test_store_async_wait_does_not_block_the_event_loop():
    manifest, chunks = build_manifest(random_payload(2 * KIB), version=0, chunk_size=KIB)
    store = ChunkStore()
    store.put_manifest(manifest)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        threading.Timer(0.2, store.put_chunk, args=(0, 1, chunks[1])).start()
        got = await store.aget_chunk(0, 1, wait_s=5)
        timed_out = await store.aget_chunk(0, 0, wait_s=0.05)
        task.cancel()
        return got, timed_out, ticks

    got, timed_out, ticks = asyncio.run(main())
    assert got == chunks[1] and timed_out is None and ticks >= 10


# ---------------------------------------------------------------------- throttle
