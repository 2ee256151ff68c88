"""The training service's tenants: one API key per user, stored hashed, issued and revoked while it runs.

ECHO-2's authors run their service for "students and researchers worldwide" (arXiv 2602.02192,
§6); an open service must keep its users apart. Every key names a *tenant*: whatever a request
made with it creates — sessions, training clients, samplers, saves, futures — is that tenant's,
and another key's ids are answered as unknown (:mod:`echo2.service.service`). The store keeps
``sha256(key)`` only (a key is 192 random bits: a plain hash is as strong as a slow one, and
the lookup compares hashes, never the key), in ``keys.json`` in the service's folder, owner-only.
``echo2 serve keys add|list|revoke`` edits it; a running service re-reads it when it changes, so
an issued key works, and a revoked one stops working, at the next request.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
import time
from pathlib import Path

#: The store's file in the service's folder.
KEYS_FILE = "keys.json"
#: What a tenant may be called: it names a folder of saves, so no path characters.
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: The tenant the key ``echo2 serve`` prints belongs to (the operator's own).
DEFAULT_TENANT = "default"
KEY_PREFIX = "tml-"


class KeyStoreError(ValueError):
    """A key operation that cannot be done (a bad or taken name, an unknown tenant): the message says why."""


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_hex(24)


class ApiKeys:
    """The tenants and their keys' hashes in ``folder / keys.json``."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / KEYS_FILE
        self._lock = threading.Lock()
        self._by_hash: dict[str, str] = {}
        self._entries: list[dict] = []
        self._read_at: float | None = None

    # ------------------------------------------------------------------ reading
    def _fresh(self) -> None:
        """Re-read the file if it changed since it was last read (call locked)."""
        try:
            changed = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._entries, self._by_hash, self._read_at = [], {}, None
            return
        if changed == self._read_at:
            return
        self._entries = json.loads(self.path.read_text())["keys"]
        self._by_hash = {e["sha256"]: e["tenant"] for e in self._entries if e.get("revoked_at") is None}
        self._read_at = changed

    def tenant_of(self, key: str | None) -> str | None:
        """The tenant whose live key ``key`` is (None: no such key, or revoked)."""
        if not key:
            return None
        with self._lock:
            self._fresh()
            return self._by_hash.get(key_hash(key))

    def listing(self) -> list[dict]:
        """Every tenant ever issued a key: its name, when, and when revoked (never the hash)."""
        with self._lock:
            self._fresh()
            return [{k: v for k, v in e.items() if k != "sha256"} for e in self._entries]

    # ------------------------------------------------------------------ writing
    def issue(self, tenant: str, key: str | None = None) -> str:
        """A new key for ``tenant`` (its first, or another beside those it has); ``key``: that key
        (the one a service made before tenants existed), else a new one. Returns the key: shown
        once, never stored."""
        if not TENANT_NAME.fullmatch(tenant):
            raise KeyStoreError(f"tenant name {tenant[:40]!r} must be 1-32 lower-case letters, digits, _ and -, "
                            f"starting with a letter or digit")
        key = key or new_key()
        with self._lock:
            self._fresh()
            self._entries.append({"tenant": tenant, "sha256": key_hash(key), "issued_at": time.time(),
                                  "revoked_at": None})
            self._write()
        return key

    def revoke(self, tenant: str) -> int:
        """Revoke every live key of ``tenant``; how many (its saves stay on disk)."""
        with self._lock:
            self._fresh()
            live = [e for e in self._entries if e["tenant"] == tenant and e.get("revoked_at") is None]
            if not live:
                raise KeyStoreError(f"tenant {tenant!r} has no live key")
            for entry in live:
                entry["revoked_at"] = time.time()
            self._write()
        return len(live)

    def _write(self) -> None:
        """The store, replaced whole (written aside, owner-only, then renamed over it; call locked)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        aside = self.path.with_name(self.path.name + ".new")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump({"keys": self._entries}, file, indent=1)
        os.replace(aside, self.path)
        self._read_at = None
        self._fresh()
