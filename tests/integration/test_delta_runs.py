"""Delta versions: XOR + byte shuffle + zstd reproduces the new payload bit for bit, or says why not."""

from __future__ import annotations

# ---------------------------------------------------------------- delta versions through relays
from delta_support import (
    Node,
    learner,  # noqa: F401 (fixtures)
    publishing,
)

from echo2.broadcast.chunk_store import ChunkStore  # noqa: E402
from echo2.broadcast.delta_fetch import fetch_by_delta  # noqa: E402
from echo2.broadcast.downloader import fetch_version  # noqa: E402
from echo2.protocol import DeltaStep  # noqa: E402


def test_a_worker_holding_the_base_rebuilds_the_version_and_relays_both_forms(learner):
    publisher, relay, infos = learner
    parent, child, late = Node(), Node(), Node()
    try:
        for node in (parent, child):
            fetch_version(1, [relay.url], node.store, expected_sha256=infos[1].sha256)
        payload = fetch_by_delta(infos[2], [relay.url], parent.store, parent.deltas)
        assert payload == publisher.store.payload(2) and parent.store.complete(2)
        # the child gets the delta from its parent (the learner is only the fallback)
        rebuilt = fetch_by_delta(infos[2], [parent.relay.url, relay.url], child.store, child.deltas)
        assert rebuilt == payload
        # a worker without the base gets None (it fetches the full version, here from the parent)
        assert fetch_by_delta(infos[2], [relay.url], late.store, late.deltas) is None
        full = fetch_version(2, [parent.relay.url], late.store, expected_sha256=infos[2].sha256)
        assert full.payload == payload and full.stats.bytes_by_source == {parent.relay.url: len(payload)}
    finally:
        for node in (parent, child, late):
            node.close()


def test_a_run_with_delta_versions_trains_and_its_workers_apply_deltas(tmp_path):
    import json

    from echo2.config import load_config
    from echo2.launch.train import run_training

    config = load_config(overrides=[
        "broadcast.encoding=delta", "broadcast.dtype=bfloat16", f"run.dir={tmp_path}", "run.steps=6",
        "learner.groups_per_step=8", "eval.every=6", "eval.size=20", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0"])
    summary = run_training(config)
    assert summary.reliability["groups_rejected"] == {} and summary.result.steps == 6
    records = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "delta_bytes" in r]
    assert len(steps) == 6 and all(r["delta_bytes"] < r["broadcast_bytes"] / 2 for r in steps)
    applied = [max((r.get(f"worker/{w}/delta_fetches", 0) for r in records), default=0) for w in ("local-0", "local-1")]
    assert sum(applied) >= 4  # workers rebuilt versions from deltas (and loaded them)


def test_a_worker_two_versions_behind_rebuilds_the_newest_from_two_deltas():
    # each step moves the last layer only: two deltas are smaller than a version
    with publishing(lambda model: [model[1].weight]) as (publisher, relay, infos):
        behind, parent = Node(), Node()
        catch_up = [DeltaStep(version=1, sha256=infos[1].sha256, delta_sha256=infos[1].delta_sha256,
                              delta_bytes=infos[1].delta_bytes)]
        info = infos[2].model_copy(update={"catch_up": catch_up})
        try:
            fetch_version(0, [relay.url], behind.store, expected_sha256=infos[0].sha256)
            # the parent holds v2's delta, not v1's (it fetched v1 whole): the child asks it first
            # for both and the learner for v1's, at once
            fetch_version(1, [relay.url], parent.store, expected_sha256=infos[1].sha256)
            assert fetch_by_delta(infos[2], [relay.url], parent.store, parent.deltas) is not None
            payload = fetch_by_delta(info, [parent.relay.url, relay.url], behind.store, behind.deltas, timeout_s=20)
            assert payload == publisher.store.payload(2) and behind.store.complete(2)
            assert behind.deltas.complete(1) and behind.deltas.complete(2) and not behind.store.complete(1)
            # a wrong hash on the way: nothing is loaded, the caller fetches the full version
            lying = info.model_copy(update={"catch_up": [catch_up[0].model_copy(update={"sha256": "0" * 64})]})
            behind.store.drop(2)
            assert fetch_by_delta(lying, [relay.url], behind.store, ChunkStore(), timeout_s=20) is None
        finally:
            behind.close()
            parent.close()
