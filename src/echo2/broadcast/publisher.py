"""The learner's side of the broadcast: cut each new version into chunks, serve them, plan relays.

The learner is the root source of every version. :class:`Publisher` serialises the policy
(optionally in bf16; only its LoRA adapter in a ``kind="lora"`` run), cuts it into hashed chunks in a :class:`ChunkStore` that the coordinator's
HTTP app serves under ``/v1/broadcast`` (through the learner's upload cap, if one is set), and
hands the coordinator the planner that decides, per version, which worker relays to which
(:mod:`echo2.broadcast.topology`). With ``encoding: delta`` each version after the first is also
published as a delta against the one before (:mod:`echo2.broadcast.delta`) in a second store,
served under ``/v1/broadcast/delta``. The chunk routes accept only the run's broadcast credential
(:func:`echo2.net.guard.broadcast_credential`), never the run token itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import torch
from fastapi import FastAPI

from echo2.broadcast.bundle import bundle_copies
from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.delta import delta_base, encode_delta
from echo2.broadcast.payload import PAYLOAD_DTYPES, PayloadKind, serialize_parameters
from echo2.broadcast.relay import DELTA_PREFIX, add_broadcast_routes
from echo2.broadcast.throttle import Throttle
from echo2.broadcast.topology import Node, Plan, plan_tree, star_plan
from echo2.config import BroadcastConfig
from echo2.net.guard import broadcast_credential
from echo2.protocol import VersionInfo
from echo2.units import MIB, mbps_to_bytes_per_s


class Publisher:
    def __init__(self, config: BroadcastConfig, keep_versions: int, token: str | None,
                 kind: PayloadKind = "full", upload_mbps: float | None = None, latency_ms: float = 0.0) -> None:
        """``token``: the run token (None: chunks served to anyone); the routes accept the
        broadcast credential derived from it. ``upload_mbps`` and ``latency_ms``: the upload cap and
        the delay before each response of this chunk server (``emulation.learner_upload_mbps`` and
        ``emulation.learner_latency_ms``; None and 0: none)."""
        self.config, self.kind = config, kind
        self.token = broadcast_credential(token) if token is not None else None
        self.store = ChunkStore(keep=keep_versions)
        self.deltas = ChunkStore(keep=keep_versions) if config.encoding == "delta" else None
        self.throttle = Throttle(mbps_to_bytes_per_s(upload_mbps), latency_s=latency_ms / 1000)
        self._previous: tuple[int, bytes] | None = None  # the last version's payload, the next delta's base
        self.encode_s = 0.0
        """Seconds the last delta took to make."""

    def mount(self, app: FastAPI) -> None:
        """Serve this learner's chunks (and deltas) on the coordinator's app."""
        add_broadcast_routes(app, self.store, throttle=self.throttle, token=self.token)
        if self.deltas is not None:
            add_broadcast_routes(app, self.deltas, throttle=self.throttle, token=self.token, prefix=DELTA_PREFIX)

    def planner(self, nodes: list[Node], incumbent: Sequence[str] = ()) -> Plan:
        if self.config.mode == "star":
            return star_plan(nodes)
        return plan_tree(nodes, self.config.fan_out, self.config.learner_fan_out, incumbent)

    def publish(self, version: int, model: torch.nn.Module) -> VersionInfo:
        """Serialise ``model`` as ``version`` and start serving it (and its delta from the version
        published just before, when deltas are on and the layout is the same); returns what the
        coordinator announces of it."""
        return self.publish_payload(version, serialize_parameters(model, self.config.dtype, self.kind))

    def publish_payload(self, version: int, payload: bytes,
                        predecessors: Mapping[str, str] | None = None) -> VersionInfo:
        """:meth:`publish` of a payload already made; a training service's bundle (:mod:`.bundle`)
        names each sampler's ``predecessors`` in the bundle before, its delta's rebased base."""
        chunk_size = max(1, int(self.config.chunk_mib * MIB))
        manifest = self.store.publish(version, payload, chunk_size=chunk_size, kind=self.kind, dtype=self.config.dtype)
        info = VersionInfo(version=version, sha256=manifest.sha256, size_bytes=manifest.total_bytes)
        if self.deltas is not None:
            previous, self._previous = self._previous, (version, payload)
            consecutive = previous is not None and previous[0] == version - 1
            copies = bundle_copies(previous[1], payload, predecessors) if consecutive and predecessors is not None \
                else None
            if consecutive and (copies or len(previous[1]) == len(payload)):
                started = time.perf_counter()
                word = PAYLOAD_DTYPES[self.config.dtype].itemsize
                delta = encode_delta(previous[1], payload, word, copies=copies or None)
                delta_manifest = self.deltas.publish(version, delta, chunk_size=chunk_size, kind=self.kind,
                                                     dtype=self.config.dtype, base_sha256=delta_base(delta))
                self.encode_s = time.perf_counter() - started
                info = info.model_copy(update={"delta_sha256": delta_manifest.sha256,
                                               "delta_bytes": delta_manifest.total_bytes})
        return info

    def close(self) -> None:
        self.store.close()
        if self.deltas is not None:
            self.deltas.close()
