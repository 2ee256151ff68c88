"""The worker registry: who joined, their session credentials, who is alive.

A worker registers with the run token and gets a per-worker session credential that every
later request presents, so a worker can only act on its own leases. A session credential is
``<worker id>.<secret>``: it is looked up by the id and its secret compared in constant time,
so response times say nothing about how much of a guessed credential was right. Not locked on
its own: :class:`echo2.coordinator.state.CoordinatorState` calls it under its lock (only
:meth:`WorkerRegistry.knows`, the HTTP guard's check, runs without it).
"""

from __future__ import annotations

import logging
import secrets
import time

from echo2.coordinator.records import Rejected, WorkerRecord
from echo2.exchange import WorkerStats
from echo2.guard import broadcast_credential, same_secret, viewer_credential

log = logging.getLogger("echo2")


class WorkerRegistry:
    def __init__(self, run_token: str) -> None:
        self._run_token = run_token
        self.broadcast_token = broadcast_credential(run_token)
        """What peers present to relays and to the learner's chunk server (chunks only)."""
        self.viewer_token = viewer_credential(run_token)
        """What the live dashboard presents (its data only)."""
        self.workers: dict[str, WorkerRecord] = {}

    def add(self, name: str, relay_url: str | None, upload_bytes_per_s: float | None, price_per_hour: float,
            worker_class: str) -> WorkerRecord:
        worker_id = f"w{len(self.workers)}-{secrets.token_hex(3)}"
        name = self._unique(name or worker_id)
        record = WorkerRecord(worker_id=worker_id, name=name,
                              session_token=f"{worker_id}.{secrets.token_urlsafe(24)}",
                              relay_url=relay_url, upload_bytes_per_s=upload_bytes_per_s,
                              price_per_hour=price_per_hour, worker_class=worker_class or name or worker_id)
        self.workers[worker_id] = record
        log.info("worker %s joined as %s (relay %s, $%.2f/h)", record.name, worker_id, relay_url or "none",
                 price_per_hour)
        return record

    def _unique(self, name: str) -> str:
        """``name``, or ``name#N`` when a live worker has it: two workers under one name would
        write over each other's metrics and log lines."""
        taken = {record.name for record in self.live()}
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}#{n}"
        return candidate

    def admits(self, run_token: str | None) -> bool:
        """Is ``run_token`` the run's token? (Compared in constant time.)"""
        return same_secret(run_token, self._run_token)

    def admits_broadcast(self, credential: str | None) -> bool:
        """Is ``credential`` the run's broadcast credential? (Constant time.)"""
        return same_secret(credential, self.broadcast_token)

    def admits_viewer(self, credential: str | None) -> bool:
        """Is ``credential`` the run's viewer credential? (Constant time.)"""
        return same_secret(credential, self.viewer_token)

    def knows(self, session_token: str | None) -> WorkerRecord | None:
        """The worker ``session_token`` belongs to, dead or alive, or None (constant-time check)."""
        worker_id, _, secret = (session_token or "").partition(".")
        record = self.workers.get(worker_id) if secret else None
        return record if record is not None and same_secret(session_token, record.session_token) else None

    def authenticate(self, session_token: str | None) -> WorkerRecord:
        """The live worker holding ``session_token``, or a 401/410 refusal."""
        record = self.knows(session_token)
        if record is None:
            raise Rejected(401, "unknown or missing session credential; register first", "unauthorized")
        if record.left:
            raise Rejected(410, "this worker deregistered (left the run); register again to rejoin", "left")
        if not record.alive:
            raise Rejected(410, "this worker was declared dead (no heartbeat); register again", "dead")
        return record

    def records(self) -> list[WorkerRecord]:
        return list(self.workers.values())

    def live(self) -> list[WorkerRecord]:
        return [record for record in self.workers.values() if record.alive]

    def silent(self, timeout_s: float) -> list[WorkerRecord]:
        """Live workers not heard from for ``timeout_s``."""
        now = time.monotonic()
        return [record for record in self.live() if now - record.last_seen > timeout_s]

    def relay_urls(self) -> dict[str, str]:
        """Worker id -> relay URL of the live workers that serve chunks to peers."""
        return {r.worker_id: r.relay_url for r in self.live() if r.relay_url}

    def stats(self) -> list[WorkerStats]:
        return [WorkerStats(r.name, r.alive, r.active, r.throughput, r.samples, r.tokens, r.generate_seconds,
                            r.fetches, r.last_fetch_seconds, r.delta_fetches) for r in self.workers.values()]
