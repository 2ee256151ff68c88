"""The learner's side of the broadcast: cut each new version into chunks, serve them, plan relays.

The learner is the root source of every version. :class:`Publisher` serialises the policy
(optionally in bf16; only its LoRA adapter in a ``kind="lora"`` run), cuts it into hashed chunks in a :class:`ChunkStore` that the coordinator's
HTTP app serves under ``/v1/broadcast`` (through the learner's upload cap, if one is set), and
hands the coordinator the planner that decides, per version, which worker relays to which
(:mod:`echo2.broadcast.topology`). The chunk routes accept only the run's broadcast credential
(:func:`echo2.guard.broadcast_credential`), never the run token itself.
"""

from __future__ import annotations

import torch
from fastapi import FastAPI

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.payload import PayloadKind, serialize_parameters
from echo2.broadcast.relay import add_broadcast_routes
from echo2.broadcast.throttle import Throttle
from echo2.broadcast.topology import Node, Plan, plan_tree, star_plan
from echo2.config import BroadcastConfig
from echo2.guard import broadcast_credential
from echo2.units import MIB, mbps_to_bytes_per_s


class Publisher:
    def __init__(self, config: BroadcastConfig, keep_versions: int, token: str | None,
                 kind: PayloadKind = "full") -> None:
        """``token``: the run token (None: chunks served to anyone); the routes accept the
        broadcast credential derived from it."""
        self.config, self.kind = config, kind
        self.token = broadcast_credential(token) if token is not None else None
        self.store = ChunkStore(keep=keep_versions)
        self.throttle = Throttle(mbps_to_bytes_per_s(config.learner_upload_mbps))

    def mount(self, app: FastAPI) -> None:
        """Serve this learner's chunks on the coordinator's app."""
        add_broadcast_routes(app, self.store, throttle=self.throttle, token=self.token)

    def planner(self, nodes: list[Node]) -> Plan:
        if self.config.mode == "star":
            return star_plan(nodes)
        return plan_tree(nodes, fan_out=self.config.fan_out, learner_fan_out=self.config.learner_fan_out)

    def publish(self, version: int, model: torch.nn.Module) -> tuple[str, int]:
        """Serialise ``model`` as ``version`` and start serving it; returns (sha256, size in bytes)."""
        payload = serialize_parameters(model, self.config.dtype, self.kind)
        manifest = self.store.publish(version, payload, chunk_size=max(1, int(self.config.chunk_mib * MIB)),
                                      kind=self.kind, dtype=self.config.dtype)
        return manifest.sha256, manifest.total_bytes

    def close(self) -> None:
        self.store.close()
