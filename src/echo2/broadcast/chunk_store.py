"""What a node holds of the newest versions: manifests and verified chunks, with long-poll waits.

Every node (the learner's root source and every relaying worker) keeps one store. Its own
downloader puts chunks in as they arrive; its relay serves them out, and a request for a chunk
that is not there yet waits for it (bounded) instead of failing: that wait is what makes a chain
of relays pipeline, each node forwarding chunk *i* while it receives chunk *i+1*.

Only the newest ``keep`` versions (default 2: current and previous) are kept, so memory stays
bounded at about ``keep`` payloads; a version older than the ones kept is *evicted* and every
request for it fails at once, so nobody waits on something that will never come.

Thread-safe; the ``a*`` methods are the asyncio flavours (they wait on an ``asyncio.Event``
that writers set through ``call_soon_threadsafe``), so a relay's event loop is never blocked
and no thread is parked per waiting request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Callable, Literal, TypeVar

from echo2.broadcast.integrity import CorruptPayload, sha256
from echo2.broadcast.manifest import DEFAULT_CHUNK_SIZE, Manifest, build_manifest, verify_chunk, verify_whole

T = TypeVar("T")

#: Versions a store keeps by default (current and previous); the simulator's stores keep as many.
KEEP_VERSIONS = 2


class UnknownVersion(LookupError):
    """The store does not hold this version (yet, or any more)."""


class VersionEvicted(UnknownVersion):
    """The version is older than the ones the store keeps: it will not come back."""


class StoreClosed(RuntimeError):
    """The store was closed (its node is shutting down)."""


@dataclass
class _Entry:
    manifest: Manifest
    chunks: list[bytes | None]
    held: int = 0


class ChunkStore:
    def __init__(self, keep: int = KEEP_VERSIONS) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, not {keep}")
        self.keep = keep
        self._entries: dict[int, _Entry] = {}
        self._floor = 0  # versions below this were evicted
        self._receiving = -1  # newest version this node set out to fetch (see receive)
        self._closed = False
        self._cond = threading.Condition()
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    # ------------------------------------------------------------------ writing
    def publish(self, version: int, payload: bytes, chunk_size: int = DEFAULT_CHUNK_SIZE,
                kind: Literal["full", "lora", "bundle"] = "full", dtype: str | None = None,
                base_sha256: str | None = None) -> Manifest:
        """Root source: cut ``payload`` into chunks and hold all of them (see :func:`build_manifest`)."""
        manifest, chunks = build_manifest(payload, version, chunk_size, kind, dtype, base_sha256)
        with self._cond:
            entry = self._insert(manifest)
            entry.chunks, entry.held = list(chunks), len(chunks)
            self._notify()
        return manifest

    def put_manifest(self, manifest: Manifest) -> None:
        """Start holding ``manifest.version`` (no-op if already held with the same manifest)."""
        with self._cond:
            self._insert(manifest)
            self._notify()

    def put_chunk(self, version: int, index: int, data: bytes) -> bool:
        """Add a chunk after checking it against the manifest; False if it was already held.

        Raises :class:`CorruptPayload` (naming the chunk) on a size or hash mismatch and
        :class:`UnknownVersion` if the manifest is not held.
        """
        while True:
            with self._cond:
                manifest = self._entry(version).manifest
            verify_chunk(manifest, index, data)  # hashing outside the lock: it takes milliseconds
            with self._cond:
                entry = self._entry(version)
                if entry.manifest is not manifest:  # dropped and put again meanwhile: check again
                    continue
                if entry.chunks[index] is not None:
                    return False
                entry.chunks[index] = data
                entry.held += 1
                self._notify()
                return True

    def receive(self, version: int) -> None:
        """This node sets out to fetch ``version``. It fetches versions in increasing order, so an
        older one it does not hold will never come: its waiters are told at once (skipped), before
        the new version's manifest is in. Without this, two relays fetching different versions can
        each long-poll the other (a child of one asks the other for an older version than the one
        it is after) until a stall timeout breaks the cycle."""
        with self._cond:
            if version > self._receiving:
                self._receiving = version
                self._notify()

    def clear(self) -> None:
        """Forget every version and what was fetched: the learner resumed and version numbers
        start over with other weights."""
        with self._cond:
            self._entries.clear()
            self._floor, self._receiving = 0, -1
            self._notify()

    def retain(self, versions: Collection[int]) -> None:
        """Forget every version but ``versions`` (a worker registered anew keeps what the
        coordinator still vouches for); the eviction floor and the version being received start
        over from those kept, as :meth:`clear` starts them over from nothing."""
        with self._cond:
            for version in [v for v in self._entries if v not in versions]:
                del self._entries[version]
            self._floor = min(self._entries, default=0)
            self._receiving = max(self._entries, default=-1)
            self._notify()

    def drop(self, version: int) -> None:
        """Forget a version now (it may be put again later)."""
        with self._cond:
            self._entries.pop(version, None)
            self._notify()

    def close(self) -> None:
        """Wake every waiter with :class:`StoreClosed`; later calls raise it too."""
        with self._cond:
            self._closed = True
            self._notify()

    # ------------------------------------------------------------------ reading (no wait)
    def versions(self) -> list[int]:
        with self._cond:
            return sorted(self._entries)

    def manifest(self, version: int) -> Manifest | None:
        with self._cond:
            entry = self._lookup(version)
            return entry.manifest if entry else None

    def held(self, version: int) -> int:
        """How many chunks of ``version`` are in (0 if its manifest is not)."""
        with self._cond:
            entry = self._lookup(version)
            return entry.held if entry else 0

    def missing(self, version: int) -> list[int]:
        with self._cond:
            return [i for i, chunk in enumerate(self._entry(version).chunks) if chunk is None]

    def complete(self, version: int) -> bool:
        with self._cond:
            entry = self._lookup(version)
            return entry is not None and entry.held == entry.manifest.num_chunks

    def verify(self, version: int) -> Manifest:
        """Check a complete version's whole-payload hash without joining the chunks; returns its manifest."""
        manifest, chunks = self._complete_chunks(version)
        verify_whole(manifest, chunks)
        return manifest

    def payload(self, version: int) -> bytes:
        """The whole payload of a complete version, checked against the manifest's sha256."""
        manifest, chunks = self._complete_chunks(version)
        payload = b"".join(chunks)
        if sha256(payload) != manifest.sha256:
            raise CorruptPayload(f"v{version}: the chunks verify but the whole payload does not match the "
                                 "manifest's sha256 (forged or inconsistent manifest)")
        return payload

    # ------------------------------------------------------------------ waiting
    def get_manifest(self, version: int, wait_s: float = 0.0) -> Manifest | None:
        """The manifest, waiting up to ``wait_s`` for it; None on timeout."""
        return self._wait(self._manifest_probe(version), wait_s)

    def get_chunk(self, version: int, index: int, wait_s: float = 0.0) -> bytes | None:
        """Chunk ``index``, waiting up to ``wait_s`` for it (and for the manifest); None on timeout.

        Raises :class:`VersionEvicted` at once (also while waiting) when the version is, or
        becomes, older than the ones kept, and ``IndexError`` for an index past the last chunk.
        """
        return self._wait(self._chunk_probe(version, index), wait_s)

    async def aget_manifest(self, version: int, wait_s: float = 0.0) -> Manifest | None:
        return await self._await(self._manifest_probe(version), wait_s)

    async def aget_chunk(self, version: int, index: int, wait_s: float = 0.0) -> bytes | None:
        return await self._await(self._chunk_probe(version, index), wait_s)

    # ------------------------------------------------------------------ internals (lock held)
    def _lookup(self, version: int) -> _Entry | None:
        if self._closed:
            raise StoreClosed("the chunk store is closed")
        if version < self._floor:
            raise VersionEvicted(f"v{version} was evicted (this node keeps v{self._floor} and newer)")
        return self._entries.get(version)

    def _entry(self, version: int) -> _Entry:
        entry = self._lookup(version)
        if entry is None:
            raise UnknownVersion(f"v{version} is not held here (held: {sorted(self._entries)})")
        return entry

    def _complete_chunks(self, version: int) -> tuple[Manifest, list[bytes]]:
        with self._cond:
            entry = self._entry(version)
            if entry.held != entry.manifest.num_chunks:
                raise UnknownVersion(f"v{version} is incomplete ({entry.held}/{entry.manifest.num_chunks} chunks)")
            return entry.manifest, list(entry.chunks)  # type: ignore[arg-type]

    def _insert(self, manifest: Manifest) -> _Entry:
        version = manifest.version
        existing = self._lookup(version)
        if existing is not None:
            if existing.manifest != manifest:
                raise CorruptPayload(f"v{version}: a different manifest is already held (sha256 "
                                     f"{existing.manifest.sha256[:12]} vs {manifest.sha256[:12]})")
            return existing
        newer = sorted(v for v in self._entries if v > version)
        if len(newer) >= self.keep:
            raise VersionEvicted(f"v{version} is older than the {self.keep} versions kept ({newer})")
        entry = self._entries[version] = _Entry(manifest, [None] * manifest.num_chunks)
        while len(self._entries) > self.keep:
            del self._entries[min(self._entries)]
            self._floor = min(self._entries)
        return entry

    def _awaited(self, version: int) -> _Entry | None:
        """:meth:`_lookup` for a waiter: a version not held while a newer one is held or being
        fetched will never come (a node fetches versions in increasing order and skips those it
        learnt of too late), so waiting for it fails at once like an evicted one: a child in a
        relay chain moves on to another source instead of waiting out its stall timeout on a
        parent that skipped it."""
        entry = self._lookup(version)
        newest = max(self._receiving, max(self._entries, default=-1))
        if entry is None and newest > version:
            raise VersionEvicted(f"v{version} was skipped (this node went on to v{newest})")
        return entry

    def _manifest_probe(self, version: int) -> Callable[[], Manifest | None]:
        def probe() -> Manifest | None:
            entry = self._awaited(version)
            return entry.manifest if entry else None
        return probe

    def _chunk_probe(self, version: int, index: int) -> Callable[[], bytes | None]:
        def probe() -> bytes | None:
            entry = self._awaited(version)
            if entry is None:
                return None
            if not 0 <= index < len(entry.chunks):
                raise IndexError(f"v{version} has no chunk {index} (it has {len(entry.chunks)})")
            if entry.chunks[index] is None and self._receiving > version:  # abandoned for a newer one
                raise VersionEvicted(f"v{version} chunk {index} will not come (this node went on to "
                                     f"v{self._receiving})")
            return entry.chunks[index]
        return probe

    def _notify(self) -> None:
        self._cond.notify_all()
        for loop, event in self._async_waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed; its waiter is gone with it
                pass

    def _wait(self, probe: Callable[[], T | None], wait_s: float) -> T | None:
        deadline = time.monotonic() + max(0.0, wait_s)
        with self._cond:
            while True:
                found = probe()
                remaining = deadline - time.monotonic()
                if found is not None or remaining <= 0:
                    return found
                self._cond.wait(remaining)

    async def _await(self, probe: Callable[[], T | None], wait_s: float) -> T | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        waiter = (loop, asyncio.Event())
        try:
            while True:
                with self._cond:
                    found = probe()
                    waiter[1].clear()
                    self._async_waiters.add(waiter)
                remaining = deadline - loop.time()
                if found is not None or remaining <= 0:
                    return found
                try:
                    await asyncio.wait_for(waiter[1].wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._cond:
                self._async_waiters.discard(waiter)
