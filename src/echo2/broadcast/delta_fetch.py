"""A worker's side of delta versions: rebuild the new version from the one it holds, or say it cannot.

With ``broadcast.encoding: delta`` the coordinator announces, beside a version's hash, the hash of
its delta from the previous version (:mod:`echo2.broadcast.delta`). A worker that holds that
previous version fetches the delta — through the same relay plan, chunk by chunk, under
``/v1/broadcast/delta`` — applies it, and checks the result against the announced hash of the
full version: the delta only changes how the bytes travel, never what a worker loads. A worker
that lacks the base (it joined late, skipped a version or restarted), or whose delta fetch fails
for any reason, fetches the full version instead. A rebuilt version is also cut into chunks in
the worker's full store, so a child that falls back to the full version can still get it from
its parent rather than from the learner.
"""

from __future__ import annotations

import logging
from typing import Any

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.delta import apply_delta
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastCancelled, BroadcastError, VersionSuperseded
from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.broadcast.relay import DELTA_PREFIX
from echo2.protocol import VersionInfo

log = logging.getLogger("echo2.broadcast")


def fetch_by_delta(info: VersionInfo, sources: list[str], store: ChunkStore, deltas: ChunkStore,
                   **fetch_options: Any) -> bytes | None:
    """``info.version``'s payload rebuilt from its delta and the previous version held in ``store``
    (put in ``store`` as a full version too); None when no delta applies or it failed (logged):
    the caller then fetches the full version. ``fetch_options`` go to :func:`fetch_version`; a
    cancelled fetch raises :class:`BroadcastCancelled`."""
    base_version = info.version - 1
    try:
        if info.delta_sha256 is None or not store.complete(base_version):
            return None
        base = store.payload(base_version)
    except LookupError:  # the base was evicted meanwhile
        return None
    try:
        result = fetch_version(info.version, sources, deltas, expected_sha256=info.delta_sha256, prefix=DELTA_PREFIX,
                               **fetch_options)
        assert result.payload is not None
        payload = apply_delta(base, result.payload)
        if sha256(payload) != info.sha256:
            raise CorruptPayload(f"v{info.version} rebuilt from its delta does not hash to the announced sha256")
    except (BroadcastCancelled, VersionSuperseded):
        raise  # the worker gave up on this version, or it is outdated: no full fetch of it either
    except (BroadcastError, CorruptPayload) as error:
        log.warning("v%d: delta not used (%s); fetching the full version", info.version, error)
        return None
    manifest = result.manifest
    store.drop(info.version)  # an earlier, abandoned full fetch may have left a partial entry
    store.publish(info.version, payload, chunk_size=manifest.chunk_size, kind=manifest.kind, dtype=manifest.dtype)
    return payload
