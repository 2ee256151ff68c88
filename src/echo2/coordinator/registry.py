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

from echo2.broadcast.topology import Node
from echo2.coordinator.records import WorkerRecord, session_refusal
from echo2.coordinator.relay_check import host_scoped
from echo2.exchange import WorkerStats
from echo2.net.guard import broadcast_credential, same_secret, viewer_credential

log = logging.getLogger("echo2")

#: Seconds a relay that a peer left for its rate is no source, the first time; four times longer
#: with each further demotion (a relay that trickles again after its time costs each child one
#: ``broadcast.stall_s``, ever less often).
DEMOTED_S = 300.0
#: Seconds a relay found silent by its child and by the coordinator is no peer's source: not
#: longer each time, since a partition that cuts it from everyone looks the same and heals (a
#: lab partition's relay, out for 300 s after its link came back, held its subtree's next case).
SILENT_S = 60.0


class WorkerRegistry:
    def __init__(self, run_token: str) -> None:
        self._run_token = run_token
        self.broadcast_token = broadcast_credential(run_token)
        """What peers present to relays and to the learner's chunk server (chunks only)."""
        self.viewer_token = viewer_credential(run_token)
        """What the live dashboard presents (its data only)."""
        self.workers: dict[str, WorkerRecord] = {}

    def add(self, name: str, relay_url: str | None, upload_bytes_per_s: float | None, price_per_hour: float,
            worker_class: str, site: str = "", relay_checked: bool = False) -> WorkerRecord:
        """``relay_checked``: its relay counts only once a check says it answers (else at its word)."""
        worker_id = f"w{len(self.workers)}-{secrets.token_hex(3)}"
        name = self._unique(name or worker_id)
        record = WorkerRecord(worker_id=worker_id, name=name,
                              session_token=f"{worker_id}.{secrets.token_urlsafe(24)}",
                              relay_url=relay_url, upload_bytes_per_s=upload_bytes_per_s, site=site,
                              relay_reachable=None if relay_checked or relay_url is None else True,
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
        if (refusal := session_refusal(record)) is not None:
            raise refusal
        return record

    def records(self) -> list[WorkerRecord]:
        return list(self.workers.values())

    def live(self) -> list[WorkerRecord]:
        return [record for record in self.workers.values() if record.alive]

    def fleet(self) -> list[WorkerRecord]:
        """Live workers not quarantined (:attr:`WorkerRecord.in_fleet`)."""
        return [record for record in self.workers.values() if record.in_fleet]

    def silent(self, timeout_s: float) -> list[WorkerRecord]:
        """Live workers not heard from for ``timeout_s``."""
        now = time.monotonic()
        return [record for record in self.live() if now - record.last_seen > timeout_s]

    def relay_checked(self, worker_id: str, reachable: bool, why: str) -> None:
        record = self.workers[worker_id]
        record.relay_reachable = reachable
        log.info("relay of %s at %s %s: %s", record.name, record.relay_url,
                 "answered: peers may fetch there" if reachable else "is unreachable: a leaf of the plan", why)

    def reported_relay(self, reporter: WorkerRecord, url: str, sources: list[str]) -> WorkerRecord | None:
        """The relay at ``url`` that ``reporter`` reports, if it is in ``sources`` (worker ids of the
        reporter's own chains): a worker can report a relay it was sent to, not any relay it names."""
        relay = next((r for r in self.fleet() if r.relay_url == url and r.worker_id in sources), None)
        return None if relay is None or relay is reporter else relay

    def silence_relay(self, relay: WorkerRecord, why: str) -> None:
        """``relay`` sent nothing to its child nor to the coordinator (``why``): no peer's source
        for :data:`SILENT_S` from now, its planned rate kept."""
        now = time.monotonic()
        if not relay.relay_demoted(now):
            log.warning("relay of %s %s: no peer's source for %.0f s", relay.name, why, SILENT_S)
        relay.relay_demoted_until = max(relay.relay_demoted_until, now + SILENT_S)

    def demote_relay(self, relay: WorkerRecord, bytes_per_s: float, why: str) -> None:
        """``relay`` was found sending at ``bytes_per_s`` (``why``: by whom): it is no peer's source
        for :data:`DEMOTED_S` (longer each time) and is planned at the rate measured."""
        now = time.monotonic()
        relay.relay_peer_rate = min(bytes_per_s, relay.relay_peer_rate if relay.relay_peer_rate is not None
                                    else bytes_per_s)
        if not relay.relay_demoted(now):
            relay.relay_demoted_until = now + DEMOTED_S * 4 ** relay.relay_demotions
            relay.relay_demotions += 1
            log.warning("relay of %s %s at %.0f B/s (planned at %.0f): no peer's source for %.0f s",
                        relay.name, why, bytes_per_s, relay.upload_bytes_per_s or 0.0, relay.relay_demoted_until - now)

    def plan_nodes(self) -> list[Node]:
        """The workers of the fleet as the broadcast planner sees them (a quarantined one relays
        for no peer): a relay only once it answered as its worker and while no peer left it for its
        rate lately, one on a host-scoped address for its own site alone."""
        now = time.monotonic()
        return [Node(r.worker_id, r.planned_upload_bytes_per_s,
                     reachable=r.relay_reachable is True and not r.relay_demoted(now), site=r.site,
                     scope=r.site if r.relay_url and host_scoped(r.relay_url) else None) for r in self.fleet()]

    def relay_urls(self) -> dict[str, str]:
        """Worker id -> relay URL of the fleet's workers that serve chunks to peers now (a demoted
        relay leaves every chain at once, not only the next version's plan)."""
        now = time.monotonic()
        return {r.worker_id: r.relay_url for r in self.fleet() if r.relay_url and not r.relay_demoted(now)}

    def relay_rates(self) -> dict[str, float]:
        """Relay URL -> the rate it is planned at (:attr:`WorkerRecord.planned_upload_bytes_per_s`)."""
        return {r.relay_url: r.planned_upload_bytes_per_s for r in self.fleet() if r.relay_url}

    def stats(self) -> list[WorkerStats]:
        return [WorkerStats(r.name, r.alive, r.active, r.throughput, r.samples, r.tokens, r.generate_seconds,
                            r.fetches, r.last_fetch_seconds, r.delta_fetches) for r in self.workers.values()]
