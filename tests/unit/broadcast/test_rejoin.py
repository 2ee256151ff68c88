"""A worker the coordinator forgot (declared dead over a partition, or a learner that resumed)
registers anew and keeps only the versions whose hashes the coordinator announces now: the one it
held loads again without a byte on the wire; another learner's versions, numbered alike, are
dropped and the new ones can come in."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save

from echo2.broadcast.chunk_store import ChunkStore, VersionEvicted
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.manifest import build_manifest
from echo2.protocol import DeltaStep, VersionInfo
from echo2.rollout.client import SessionLost
from echo2.rollout.weights import WorkerWeights, vouched_hashes

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens: a fetch that needs the network fails


def payload(version: int, learner: int = 0) -> bytes:
    """A version's weights (safetensors, a few chunks): ``learner`` tells two lineages apart."""
    return save({"w": np.full(1200, version + 1000 * learner, dtype=np.float32)})


def weights_holding(*versions: int, learner: int = 0) -> WorkerWeights:
    weights = WorkerWeights(client=None, stop=threading.Event(), record=lambda *a, **k: None, verify=True)
    for version in versions:
        weights.store.publish(version, payload(version, learner), chunk_size=1024)
    return weights


def sha(weights: WorkerWeights, version: int) -> str:
    return weights.store.manifest(version).sha256


def test_the_hashes_vouched_for_are_the_newest_and_the_catch_up_bases():
    info = VersionInfo(version=9, sha256="c" * 64, size_bytes=1, delta_sha256="d" * 64,
                       catch_up=[DeltaStep(version=8, sha256="b" * 64, delta_sha256="e" * 64, delta_bytes=10)])
    assert vouched_hashes(info) == {9: "c" * 64, 8: "b" * 64}


def test_a_worker_forgotten_over_a_partition_loads_the_version_it_held_with_nothing_on_the_wire():
    weights = weights_holding(5, 6)
    held = sha(weights, 6)
    weights.forget({6: held})
    assert weights.store.versions() == [6] and weights.version == -1  # the protocol starts over
    fetched = fetch_version(6, [UNREACHABLE], weights.store, expected_sha256=held, timeout_s=5)
    assert fetched.stats.manifest_source == "store" and fetched.stats.bytes_by_source == {}
    assert fetched.payload == payload(6)
    weights.close()


def test_a_download_cut_off_by_the_partition_resumes_from_the_chunks_already_verified():
    weights = weights_holding(5)
    manifest, chunks = build_manifest(payload(6), 6, 1024, "full", None, None)
    weights.store.put_manifest(manifest)
    for index in (0, 1):
        weights.store.put_chunk(6, index, chunks[index])
    weights.forget({6: manifest.sha256})
    assert weights.store.versions() == [6] and weights.store.missing(6) == list(range(2, manifest.num_chunks))
    weights.close()


def test_after_a_resume_versions_numbered_alike_with_other_weights_are_dropped_and_older_ones_come_in():
    weights = weights_holding(5, 6)
    resumed = weights_holding(3, 6, learner=1)  # the resumed learner's v6 is not this v6
    weights.forget(vouched_hashes(VersionInfo(version=6, sha256=sha(resumed, 6), size_bytes=1)))
    assert weights.store.versions() == []
    weights.store.publish(3, payload(3, learner=1))  # below the old floor: it must come in
    assert weights.store.versions() == [3]
    weights.close()
    resumed.close()


def test_a_store_retaining_some_versions_starts_its_floor_over_from_them():
    store = ChunkStore(keep=2)
    for version in (4, 5, 6):
        store.publish(version, payload(version))
    store.retain([6])
    assert store.versions() == [6]
    with pytest.raises(VersionEvicted):  # older than what it kept: it will not be asked for again
        store.publish(5, payload(5))
    store.publish(7, payload(7))
    assert store.versions() == [6, 7]
    store.retain([])  # nothing kept: any version may come, as after clear()
    store.publish(1, payload(1))
    assert store.versions() == [1]


def test_the_background_fetch_stops_asking_once_the_session_is_lost_until_it_is_registered_again():
    """It had asked again every 0.1 s, each refused 410, until the main loop registered anew."""
    asked = []

    def version():
        asked.append(time.monotonic())
        raise SessionLost(410, "this worker was declared dead (no heartbeat); register again")

    weights = WorkerWeights(client=SimpleNamespace(version=version), stop=threading.Event(),
                            record=lambda *a, **k: None, verify=True)
    lost = threading.Event()
    weights.start(SimpleNamespace(protocol="async", swap_between_turns=False, swap_between_steps=False, max_turns=1), lambda *a: None, lost)
    fetch = threading.Thread(target=weights._fetch_in_background, args=(3,))
    fetch.start()
    time.sleep(1.0)
    assert lost.is_set() and len(asked) == 1 and fetch.is_alive()  # said so, and waits
    lost.clear()  # registered again
    fetch.join(2)
    assert not fetch.is_alive() and len(asked) == 1
    weights.close()
