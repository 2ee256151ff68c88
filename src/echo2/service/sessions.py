"""Client sessions: what a Tinker client holds on the service, and when it is given back.

The SDK opens a session (``create_session``), heartbeats it every 10 s from a background thread
and finishes it on ``close()``; a client that dies sends neither. A session silent for
``timeout_s`` is ended by the reaper as if finished: its training clients' adapters and optimizer
states and its sampling clients are released (what it saved with ``save_weights`` stays on disk).
A heartbeat for an ended session is answered 410, which stops the SDK's heartbeat loop.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field


@dataclass
class Session:
    session_id: str
    tenant: str
    """The key's tenant that opened it (:mod:`echo2.service.keys`): everything the session holds is its."""
    tags: list[str]
    sdk_version: str
    created_at: float
    last_seen: float
    models: list[str] = field(default_factory=list)
    """Training clients' model ids."""
    samplers: list[str] = field(default_factory=list)
    """Sampling sessions' ids."""


class Sessions:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._live: dict[str, Session] = {}
        self.ended: set[str] = set()
        """Ids of sessions finished or reaped (a heartbeat for one is told it is gone)."""

    def create(self, tags: list[str], sdk_version: str, tenant: str, now: float | None = None) -> Session:
        now = time.monotonic() if now is None else now
        session = Session(f"session-{uuid.uuid4().hex[:12]}", tenant, list(tags), sdk_version, now, now)
        with self._lock:
            self._live[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            return self._live.get(session_id)

    def heartbeat(self, session_id: str, now: float | None = None) -> bool:
        """Whether ``session_id`` is live (its silence timer restarted)."""
        with self._lock:
            session = self._live.get(session_id)
            if session is not None:
                session.last_seen = time.monotonic() if now is None else now
            return session is not None

    def end(self, session_id: str) -> Session | None:
        """End ``session_id`` (finished by its client); the session, for its resources to be released."""
        with self._lock:
            self.ended.add(session_id)
            return self._live.pop(session_id, None)

    def silent(self, now: float | None = None) -> list[Session]:
        """End and return the sessions silent longer than ``timeout_s``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = [s for s in self._live.values() if now - s.last_seen > self.timeout_s]
            for session in gone:
                del self._live[session.session_id]
                self.ended.add(session.session_id)
            return gone

    def live(self) -> list[Session]:
        with self._lock:
            return list(self._live.values())
