"""Delta versions: XOR + byte shuffle + zstd reproduces the new payload bit for bit, or says why not."""

from __future__ import annotations

# ---------------------------------------------------------------- delta versions through relays
import numpy as np
import pytest
import torch  # noqa: E402
from delta_support import (
    Node,
    learner,  # noqa: F401 (fixtures)
    versions,
)

from echo2.broadcast.chunk_store import ChunkStore  # noqa: E402
from echo2.broadcast.delta import DeltaMismatch, _shuffle, _unshuffle, apply_delta, delta_base, encode_delta
from echo2.broadcast.delta_fetch import delta_route, fetch_by_delta  # noqa: E402
from echo2.broadcast.downloader import fetch_version  # noqa: E402
from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.broadcast.publisher import Publisher  # noqa: E402
from echo2.broadcast.relay import RelayServer  # noqa: E402
from echo2.config import BroadcastConfig  # noqa: E402
from echo2.protocol import DeltaStep, VersionInfo  # noqa: E402


@pytest.mark.parametrize("word", [1, 2, 4, 8])
def test_shuffle_is_undone_exactly_whatever_the_length(word):
    data = np.arange(37, dtype=np.uint8)
    assert np.array_equal(_unshuffle(_shuffle(data, word), word), data)


def test_a_delta_rebuilds_the_new_version_bit_for_bit_and_is_smaller():
    base, new = versions()
    delta = encode_delta(base, new, word=4)
    assert apply_delta(base, delta) == new
    assert delta_base(delta) == sha256(base)
    assert len(delta) < 0.8 * len(new)
    assert len(encode_delta(base, base, word=4)) < 1000  # nothing changed: almost nothing sent


def test_a_delta_refuses_the_wrong_base_a_corrupt_body_and_another_layout():
    base, new = versions()
    delta = encode_delta(base, new, word=4)
    other, _ = versions(seed=1)
    with pytest.raises(DeltaMismatch):
        apply_delta(other, delta)
    broken = bytearray(delta)
    broken[-10] ^= 0xFF
    with pytest.raises(CorruptPayload):
        apply_delta(base, bytes(broken))
    with pytest.raises(DeltaMismatch):
        encode_delta(base, new[:-4], word=4)
    with pytest.raises(CorruptPayload, match="magic"):
        apply_delta(base, b"not a delta at all, really not")


def test_a_delta_whose_body_rebuilds_other_bytes_is_refused_by_its_result_check():
    """A well-formed delta (it decompresses) whose rebuilt bytes are not the version it announces:
    only the final sha256 check stands between it and the worker's model."""
    base, new = versions()
    delta = bytearray(encode_delta(base, new, word=4))
    delta[8 + 32:8 + 64] = bytes.fromhex(sha256(b"another version"))  # the header's result hash
    with pytest.raises(CorruptPayload, match="does not match its announced sha256"):
        apply_delta(base, bytes(delta))


def test_the_learner_publishes_a_delta_from_the_previous_version_only(learner):
    publisher, _, infos = learner
    assert infos[0].delta_sha256 is None  # nothing to make it from
    assert all(i.delta_sha256 is not None and 0 < i.delta_bytes < i.size_bytes for i in infos[1:])
    assert publisher.deltas.manifest(2).base_sha256 == infos[1].sha256 and publisher.encode_s > 0


def test_a_delta_that_does_not_rebuild_the_announced_version_is_not_used(learner):
    _, relay, infos = learner
    node, stranger = Node(), Node()
    try:
        fetch_version(1, [relay.url], node.store, expected_sha256=infos[1].sha256)
        lying = infos[2].model_copy(update={"sha256": "0" * 64})  # the result would not match it
        assert fetch_by_delta(lying, [relay.url], node.store, node.deltas) is None
        assert not node.store.complete(2)
        # another base under the same version number (a different model): the delta refuses it
        other = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
        from echo2.broadcast.payload import serialize_parameters

        stranger.store.publish(1, serialize_parameters(other, "float32"), chunk_size=4096)
        assert fetch_by_delta(infos[2], [relay.url], stranger.store, stranger.deltas, timeout_s=10) is None
    finally:
        node.close()
        stranger.close()


def test_a_cancelled_delta_fetch_is_not_retried_as_a_full_one(learner):
    """A worker that re-registers (a resumed learner) cancels the fetch in flight: the version it
    asked for may never be published again, so falling back to its full form would only wait."""
    import threading

    from echo2.broadcast.errors import BroadcastCancelled

    _, relay, infos = learner
    node = Node()
    try:
        fetch_version(1, [relay.url], node.store, expected_sha256=infos[1].sha256)
        cancelled = threading.Event()
        cancelled.set()
        with pytest.raises(BroadcastCancelled):
            fetch_by_delta(infos[2], [relay.url], node.store, node.deltas, cancel=cancelled)
    finally:
        node.close()


def _step(version: int, delta_bytes: int) -> DeltaStep:
    return DeltaStep(version=version, sha256=f"{version:064x}", delta_sha256=f"{version + 100:064x}",
                     delta_bytes=delta_bytes)


def test_a_worker_behind_catches_up_by_the_deltas_in_between_when_they_are_smaller_than_the_version():
    from echo2.broadcast.payload import serialize_parameters

    store = ChunkStore()
    store.publish(3, serialize_parameters(torch.nn.Linear(64, 64), "float32"), chunk_size=4096)  # holds v3 (16.9 kB)
    info = VersionInfo(version=6, sha256=f"{6:064x}", size_bytes=16384, delta_sha256=f"{106:064x}", delta_bytes=3000,
                       catch_up=[_step(3, 3000), _step(4, 3000), _step(5, 3000)])
    base, route = delta_route(info, store)
    assert base == 3 and [step.version for step in route] == [4, 5, 6] and route[-1].sha256 == info.sha256
    # three deltas larger than the version: the full version is cheaper
    assert delta_route(info.model_copy(update={"delta_bytes": 12000}), store) is None
    # a version on the way without its delta (not kept any more): no route
    assert delta_route(info.model_copy(update={"catch_up": [_step(5, 3000)]}), store) is None
    # the previous version held: its delta alone, whatever its size (as before)
    assert delta_route(info.model_copy(update={"version": 4, "delta_bytes": 20000, "catch_up": [_step(3, 1)]}),
                       store)[0] == 3


def test_a_bundle_that_gained_and_lost_samplers_travels_as_a_small_rebased_delta():
    """A training service's versions: s2 is s1 one optimizer step on, s1 leaves, s3 is another
    client's first. The delta sends s2's step and s3, not the samplers the worker holds already,
    and a worker holding the bundle before rebuilds the new one bit for bit."""
    from echo2.broadcast.bundle import SamplerAdapter, bundle_copies, bundle_payload

    torch.manual_seed(0)

    def adapter(tensors: dict[str, torch.Tensor]) -> SamplerAdapter:
        return SamplerAdapter(rank=4, alpha=8.0, tensors=tensors)

    shapes = {f"layers.{k}.{m}.lora_{ab}.weight": (4, 256) if ab == "A" else (256, 4)
              for k in range(4) for m in ("q_proj", "v_proj") for ab in "AB"}
    s1 = {key: torch.randn(shape) for key, shape in shapes.items()}
    s2 = {key: t + torch.randn_like(t) * 1e-4 for key, t in s1.items()}
    kept = {key: torch.randn(shape) for key, shape in shapes.items()}
    before = bundle_payload({"s0": adapter(kept), "s1": adapter(s1)})
    after = bundle_payload({"s0": adapter(kept), "s2": adapter(s2), "s3": adapter({k: torch.randn(v) for k, v in
                                                                                 list(shapes.items())[:4]})})
    publisher = Publisher(BroadcastConfig(encoding="delta", chunk_mib=0.004), keep_versions=3, token=None)
    relay = RelayServer(publisher.store, deltas=publisher.deltas).start()
    worker = Node()
    try:
        first = publisher.publish_payload(0, before, {})
        second = publisher.publish_payload(1, after, {"s0": "s0", "s2": "s1"})
        new_sampler = 4 * 4 * 4 * 256  # s3's four float32 tensors of 4 x 256
        assert second.delta_sha256 is not None and second.delta_bytes < 0.5 * second.size_bytes
        assert second.delta_bytes < new_sampler + 0.3 * (len(after) - new_sampler)  # s0 costs nothing, s2 its step
        fetch_version(0, [relay.url], worker.store, expected_sha256=first.sha256)
        assert fetch_by_delta(second, [relay.url], worker.store, worker.deltas) == after
        copies = bundle_copies(before, after, {"s0": "s0", "s2": "s1"})
        assert len(copies) == 2 * len(shapes)  # every tensor of s0 and s2; none for s3 (no predecessor)
        with pytest.raises(DeltaMismatch, match="falls outside"):
            encode_delta(before, after, 4, copies=[(len(after) - 2, 0, 10)])
    finally:
        worker.close()
        relay.stop()
        publisher.close()
