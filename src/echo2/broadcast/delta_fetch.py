"""A worker's side of delta versions: rebuild the new version from the one it holds, or say it cannot.

With ``broadcast.encoding: delta`` the coordinator announces, beside a version's hash, the hash of
its delta from the previous version (:mod:`echo2.broadcast.delta`). A worker that holds that
previous version fetches the delta — through the same relay plan, chunk by chunk, under
``/v1/broadcast/delta`` — applies it, and checks the result against the announced hash of the
full version: the delta only changes how the bytes travel, never what a worker loads. A worker
a few versions behind (it skipped some) applies the deltas of the versions in between in turn,
when together they are smaller than the version (the coordinator lists those it keeps:
``VersionInfo.catch_up``); a worker that holds none of them (it joined late or restarted), or
whose delta fetch fails for any reason, fetches the full version instead. A rebuilt version is
also cut into chunks in the worker's full store, so a child that falls back to the full version
can still get it from its parent rather than from the learner.
"""

from __future__ import annotations

import logging
from typing import Any

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.delta import apply_delta
from echo2.broadcast.downloader import FetchResult, fetch_version
from echo2.broadcast.errors import BroadcastCancelled, BroadcastError, VersionSuperseded
from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.broadcast.relay import DELTA_PREFIX
from echo2.protocol import DeltaStep, VersionInfo

log = logging.getLogger("echo2.broadcast")


def delta_route(info: VersionInfo, store: ChunkStore) -> tuple[int, list[DeltaStep]] | None:
    """The newest version ``store`` holds from which deltas lead to ``info.version``, and those
    deltas, oldest first; None when the full version is the cheaper (or the only) way: no delta
    chain reaches a held version, or a chain of several deltas is larger than the version itself —
    or the store holds that version whole already (a worker registered anew keeps it)."""
    if info.delta_sha256 is None or store.complete(info.version):
        return None
    steps = {step.version: step for step in info.catch_up}
    steps[info.version] = DeltaStep(version=info.version, sha256=info.sha256, delta_sha256=info.delta_sha256,
                                    delta_bytes=info.delta_bytes or 0)
    route: list[DeltaStep] = []
    version = info.version
    while version in steps:
        route.insert(0, steps[version])
        if store.complete(version - 1):
            cheaper = len(route) == 1 or sum(step.delta_bytes for step in route) < info.size_bytes
            return (version - 1, route) if cheaper else None
        version -= 1
    return None


def _fetch_delta(step: DeltaStep, sources: list[str], deltas: ChunkStore, on_the_way: bool,
                 **fetch_options: Any) -> FetchResult:
    """The delta of ``step.version``. One ``on_the_way`` to the version asked for may be missing at
    a relay that skipped it: such a relay is left at once, and if it says the version is gone
    (older than what it keeps), the learner, which keeps every version a worker may need, is asked."""
    def fetch(urls: list[str], **options: Any) -> FetchResult:
        return fetch_version(step.version, urls, deltas, expected_sha256=step.delta_sha256, prefix=DELTA_PREFIX,
                             **{**fetch_options, **options})

    if not on_the_way:
        return fetch(sources)
    try:
        return fetch(sources, patience_s=0.0)
    except VersionSuperseded:
        if len(sources) == 1:
            raise
        return fetch(sources[-1:], patience_s=0.0)


def fetch_by_delta(info: VersionInfo, sources: list[str], store: ChunkStore, deltas: ChunkStore,
                   **fetch_options: Any) -> bytes | None:
    """``info.version``'s payload rebuilt from a version held in ``store`` by its delta, or by the
    chain of deltas :func:`delta_route` finds (put in ``store`` as a full version too); None when
    no route applies or it failed (logged): the caller then fetches the full version.
    ``fetch_options`` go to :func:`fetch_version`; a cancelled fetch raises :class:`BroadcastCancelled`."""
    route = delta_route(info, store)
    if route is None:
        return None
    base_version, steps = route
    try:
        payload = store.payload(base_version)
    except LookupError:  # the base was evicted meanwhile
        return None
    for step in steps:
        try:
            result = _fetch_delta(step, sources, deltas, on_the_way=step.version != info.version, **fetch_options)
            assert result.payload is not None
            payload = apply_delta(payload, result.payload)
            if sha256(payload) != step.sha256:
                raise CorruptPayload(f"v{step.version} rebuilt from its delta does not hash to the announced sha256")
        except BroadcastCancelled:
            raise  # the worker gave up on this version: no full fetch of it either
        except VersionSuperseded:
            if step.version == info.version:
                raise  # outdated: fetch a newer one
            log.warning("v%d: the delta of v%d on the way is no longer served; fetching the full version",
                        info.version, step.version)
            return None
        except (BroadcastError, CorruptPayload) as error:
            log.warning("v%d: delta not used (%s); fetching the full version", info.version, error)
            return None
    if len(steps) > 1:
        log.info("v%d: caught up from v%d by %d deltas (%d bytes, the version is %d)", info.version, base_version,
                 len(steps), sum(step.delta_bytes for step in steps), info.size_bytes)
    manifest = result.manifest
    store.drop(info.version)  # an earlier, abandoned full fetch may have left a partial entry
    store.publish(info.version, payload, chunk_size=manifest.chunk_size, kind=manifest.kind, dtype=manifest.dtype)
    return payload
