"""Fetching one version chunk by chunk down an ordered list of sources, never losing progress.

``sources`` is the fallback chain the planner gives a worker: ``[parent, grandparent, ...,
learner]``. Chunks are requested in order from the current source with a long-poll, so a node
receives chunk *i* from its parent as soon as the parent has it (the pipeline). When the current
source fails for a chunk — connection refused or reset, a stall, a corrupt chunk, a refusal —
that chunk and every later one move to the next source; chunks already verified stay in the
store, so a failover costs at most the chunks in flight, and a corrupt chunk is simply asked
for again elsewhere. The last source (the learner) is retried until the deadline. A relay that
failed at the transport level is left out of the node's next fetches a while
(:mod:`echo2.broadcast.suspects`).

"Stalled" has three forms. A source that stops sending mid-response, or never answers, is dropped
after ``stall_s`` (plus ``poll_s``, its long-poll), a relay sooner where its planned rate explains
no such silence (:func:`echo2.core.fetch_chain.silence_s`): left, suspected a while, not reported
(a partition between two honest nodes must not cost a relay its place for everyone). A relay that
sends, but below its floor (:func:`echo2.core.fetch_chain.too_slow`: a fraction of the rate the
coordinator plans it at, ``source_rates``), is dropped once a chunk's transfer has run the chunk's
time at that floor (``stall_s`` at most) from its first byte (an honest throttled relay sends its answer's head and queues the body behind
the bodies before it), skipped a while and reported (:meth:`SuspectSources.too_slow`). A source
that answers "not yet" (with the count of chunks it holds) is kept as the chain's rules say
(:class:`echo2.core.fetch_chain.SourceChain`, which the simulator follows too). Every wait is
bounded; errors say which version, chunk and source.

``token`` is the run's broadcast credential (:func:`echo2.net.guard.broadcast_credential`), the only
one a source gets to see; ``verify`` (or the given ``client``'s) checks ``https://`` sources'
certificates (:func:`echo2.net.tls.client_context`): a source that fails the check is abandoned like
any other failing source, before the credential is sent to it.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError

from echo2.broadcast.chunk_store import ChunkStore, UnknownVersion
from echo2.broadcast.errors import BroadcastCancelled, BroadcastTimeout, VersionSuperseded, error_code
from echo2.broadcast.integrity import CorruptPayload
from echo2.broadcast.manifest import Manifest
from echo2.broadcast.relay import HELD_HEADER, PREFIX
from echo2.broadcast.source_failure import SourceFailed, below_floor, refused, unreachable
from echo2.broadcast.suspects import SuspectSources
from echo2.core.fetch_chain import POLL_S, SourceChain, default_patience_s, rate_floor, silence_s, too_slow
from echo2.protocol import AUTH_HEADER

log = logging.getLogger("echo2.broadcast")


class _Abort(Exception):
    """Another fetching thread failed; this one just stops."""


@dataclass
class FetchStats:
    version: int
    seconds: float = 0.0
    manifest_source: str | None = None
    bytes_by_source: dict[str, int] = field(default_factory=dict)
    chunks_by_source: dict[str, int] = field(default_factory=dict)
    resumed_chunks: int = 0
    """Chunks already in the store when the call began (kept from an earlier attempt)."""
    failovers: list[str] = field(default_factory=list)
    """One line per abandoned attempt: chunk, source, reason."""


@dataclass
class FetchResult:
    manifest: Manifest
    payload: bytes | None
    stats: FetchStats


def fetch_version(version: int, sources: list[str], store: ChunkStore, *, token: str | None = None,
                  timeout_s: float = 300.0, stall_s: float = 10.0, poll_s: float = POLL_S,
                  patience_s: float | None = None, in_flight: int = 2, expected_sha256: str | None = None,
                  assemble: bool = True, cancel: threading.Event | None = None,
                  client: httpx.Client | None = None, verify: ssl.SSLContext | bool = True,
                  prefix: str = PREFIX, suspects: SuspectSources | None = None,
                  source_rates: Mapping[str, float] | None = None) -> FetchResult:
    """Fetch ``version`` into ``store`` from ``sources`` (base URLs, parent first, learner last);
    ``prefix``: the routes asked (``/v1/broadcast``; a delta version's: ``DELTA_PREFIX``).

    Returns the manifest, the verified payload (None with ``assemble=False``: the store then
    holds the complete, whole-hash-verified version) and :class:`FetchStats`. ``in_flight``
    chunk requests run at once to hide per-request latency. ``expected_sha256`` (the learner's
    announced hash) rejects a manifest describing anything else. ``suspects``: the node's relays
    out of reach lately, left out of ``sources`` and told of every relay that fails now.
    ``source_rates``: the rate (bytes/s) the coordinator plans each relay at, from which its floor
    is set (a relay not named gets the lowest floor; the learner, the last source, none). Raises
    :class:`BroadcastTimeout`, :class:`BroadcastCancelled`, :class:`BroadcastError`, or
    :class:`CorruptPayload` when the chunks verify but the whole does not (a forged manifest;
    the version is then dropped from the store).
    """
    if not sources:
        raise ValueError("fetch_version needs at least one source (the learner)")
    if min(timeout_s, stall_s, poll_s) <= 0 or in_flight < 1:
        raise ValueError("timeout_s, stall_s and poll_s must be > 0 and in_flight >= 1")
    sources = [s.rstrip("/") for s in sources]
    chain = suspects.chain(sources) if suspects is not None else sources
    if skipped := [s for s in sources if s not in chain]:
        log.info("v%d: skipping %s (out of reach lately); fetching from %s", version, ", ".join(skipped), chain)
    fetch = _Fetch(version, chain, store, token, timeout_s, stall_s, poll_s,
                   patience_s if patience_s is not None else default_patience_s(stall_s, poll_s), in_flight, expected_sha256,
                   cancel, prefix, suspects, source_rates or {})
    http = client or httpx.Client(limits=httpx.Limits(max_connections=2 * in_flight + 4), verify=verify)
    try:
        return fetch.run(http, assemble)
    except UnknownVersion:  # the node started over under it (a worker registering anew clears its store)
        raise BroadcastCancelled(f"v{version} was dropped from this node's store while it was fetched") from None
    finally:
        if client is None:
            http.close()


class _Fetch:
    def __init__(self, version: int, sources: list[str], store: ChunkStore, token: str | None, timeout_s: float,
                 stall_s: float, poll_s: float, patience_s: float, in_flight: int, expected_sha256: str | None,
                 cancel: threading.Event | None, prefix: str, suspects: SuspectSources | None,
                 source_rates: Mapping[str, float]) -> None:
        self.version, self.sources, self.store, self.prefix, self.suspects = version, sources, store, prefix, suspects
        self.planned = [source_rates.get(url) for url in sources[:-1]] + [None]  # bytes/s; none for the learner
        self.floors = [rate_floor(rate) for rate in self.planned[:-1]] + [0.0]
        self.headers = {AUTH_HEADER: token} if token else {}
        self.timeout_s, self.stall_s, self.poll_s = timeout_s, stall_s, poll_s
        self.in_flight, self.expected_sha256, self.cancel = in_flight, expected_sha256, cancel
        self.deadline = time.monotonic() + timeout_s
        self.stats = FetchStats(version)
        self.lock = threading.Lock()
        self.chain = SourceChain(sources, patience_s, time.monotonic())  # under self.lock
        self.pending: deque[int] = deque()
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ top level
    def run(self, http: httpx.Client, assemble: bool) -> FetchResult:
        started = time.monotonic()
        self.http = http
        self.store.receive(self.version)
        manifest = self.manifest = self._manifest()
        missing = self.store.missing(self.version)
        self.stats.resumed_chunks = manifest.num_chunks - len(missing)
        self.pending = deque(missing)
        threads = [threading.Thread(target=self._worker, daemon=True, name=f"echo2-fetch-v{self.version}-{i}")
                   for i in range(min(self.in_flight, max(1, len(missing))))]
        for thread in threads:
            thread.start()
        for thread in threads:  # every request is bounded, so workers end soon after the deadline
            thread.join(max(0.0, self.deadline - time.monotonic()) + self.poll_s + self.stall_s + 5)
        if self.error is not None:
            raise self.error
        if any(thread.is_alive() for thread in threads) or not self.store.complete(self.version):
            raise self._timeout_error()
        try:
            payload = self.store.payload(self.version) if assemble else None
            if not assemble:
                self.store.verify(self.version)
        except CorruptPayload as error:
            self.store.drop(self.version)
            raise CorruptPayload(f"{error} (manifest from {self.stats.manifest_source})") from None
        self.stats.seconds = time.monotonic() - started
        log.info("v%d: %d chunks in %.2fs (%s)", self.version, manifest.num_chunks, self.stats.seconds,
                 ", ".join(f"{n} from {url}" for url, n in self.stats.chunks_by_source.items()) or "all held")
        return FetchResult(manifest, payload, self.stats)

    def _timeout_error(self) -> BroadcastTimeout:
        held, total = self.store.held(self.version), self.store.manifest(self.version)
        progress = f"{held}/{total.num_chunks} chunks" if total else "no manifest"
        problems = "; ".join(self.stats.failovers[-3:]) or "none recorded"
        return BroadcastTimeout(f"v{self.version} not complete within {self.timeout_s:g}s ({progress}) from "
                                f"{self.sources}; last problems: {problems}")

    def _check(self) -> None:
        if self.error is not None:
            raise _Abort()
        if self.cancel is not None and self.cancel.is_set():
            raise BroadcastCancelled(f"fetch of v{self.version} cancelled")
        if time.monotonic() > self.deadline:
            raise self._timeout_error()

    def _timeout(self, silence_s: float | None = None) -> tuple[float, httpx.Timeout]:
        """The long-poll to ask for and the matching client timeouts (both within the deadline):
        a read may wait the long-poll plus ``silence_s`` (default: the stall budget)."""
        silence_s = self.stall_s if silence_s is None else silence_s
        remaining = max(0.05, self.deadline - time.monotonic())
        poll = min(self.poll_s, remaining)
        return poll, httpx.Timeout(min(self.poll_s + silence_s, remaining + silence_s),
                                   connect=min(5.0, self.stall_s))

    # ------------------------------------------------------------------ manifest
    def _manifest(self) -> Manifest:
        held = self.store.manifest(self.version)
        if held is not None and self.expected_sha256 in (None, held.sha256):
            self.stats.manifest_source = "store"
            return held
        if held is not None:  # an earlier attempt trusted a manifest that is not the announced one
            self.store.drop(self.version)
        while True:
            for url in self.sources:
                self._check()
                try:
                    manifest = self._manifest_from(url)
                except SourceFailed as failure:
                    self.stats.failovers.append(f"v{self.version} manifest from {url}: {failure}")
                    self._suspect(url, failure)
                    if failure.gone:
                        raise self._superseded(url, failure) from None
                    continue
                self.store.put_manifest(manifest)
                self.stats.manifest_source = url
                return manifest
            self._pause(0.2)

    def _manifest_from(self, url: str) -> Manifest:
        poll, timeout = self._timeout()
        try:
            response = self.http.get(f"{url}{self.prefix}/{self.version}/manifest", params={"wait_s": poll},
                                     headers=self.headers, timeout=timeout)
        except httpx.TransportError as error:
            raise unreachable(error, timeout) from None
        if response.status_code != 200:
            raise refused(response)
        try:
            manifest = Manifest.model_validate_json(response.content)
        except ValidationError as error:
            raise SourceFailed(f"invalid manifest ({error.error_count()} problems)") from None
        if manifest.version != self.version:
            raise SourceFailed(f"sent the manifest of v{manifest.version}")
        if self.expected_sha256 is not None and manifest.sha256 != self.expected_sha256:
            raise SourceFailed(f"manifest sha256 {manifest.sha256[:12]}… is not the announced "
                                f"{self.expected_sha256[:12]}…")
        return manifest

    # ------------------------------------------------------------------ chunks
    def _worker(self) -> None:
        try:
            while True:
                with self.lock:
                    if self.error is not None or not self.pending:
                        return
                    index = self.pending.popleft()
                self._fetch_chunk(index)
        except _Abort:
            return
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            with self.lock:
                self.error = self.error or error

    def _fetch_chunk(self, index: int) -> None:
        while True:
            self._check()
            level = self.chain.level
            try:
                if self._try_chunk(level, index):
                    return
            except SourceFailed as failure:
                self._fail(level, index, failure)
                continue
            with self.lock:
                now = time.monotonic()
                idle, held = self.chain.idle_s(level, now), self.chain.held(level)
                impatient = self.chain.impatient(level, now)
            if impatient:
                self._fail(level, index, SourceFailed(f"no progress for {idle:.1f}s (it holds {held} chunks)"))

    def _try_chunk(self, level: int, index: int) -> bool:
        """True: chunk stored; False: the source is alive but does not have it yet."""
        url, size = self.sources[level], self.manifest.chunks[index].size
        poll, timeout = self._timeout(silence_s(self.planned[level], size, self.stall_s))
        asked, began, data = time.monotonic(), None, bytearray()
        try:
            with self.http.stream("GET", f"{url}{self.prefix}/{self.version}/chunks/{index}", params={"wait_s": poll},
                                  headers=self.headers, timeout=timeout) as response:
                if response.status_code != 200:
                    response.read()
                    return self._not_yet(level, response, asked)
                for piece in response.iter_bytes():
                    data += piece
                    now = time.monotonic()
                    began = began or now  # judged from its first byte: a throttled relay queues a body behind
                    # the bodies before it (its answer's head goes first), an honest wait the stall budget bounds
                    with self.lock:
                        self.chain.progressed(level, now)
                    if len(data) > size:
                        raise SourceFailed(f"sent more than the chunk's {size} bytes", suspect=True)
                    if len(data) < size and too_slow(len(data), now - began, self.floors[level], self.stall_s, size):
                        raise self._too_slow(url, len(data), now - began, self.floors[level])
        except httpx.TransportError as error:
            raise unreachable(error, timeout) from None
        try:
            self.store.put_chunk(self.version, index, bytes(data))
        except CorruptPayload as error:
            raise SourceFailed(f"corrupt chunk ({error})", suspect=True) from None
        with self.lock:
            self.stats.bytes_by_source[url] = self.stats.bytes_by_source.get(url, 0) + len(data)
            self.stats.chunks_by_source[url] = self.stats.chunks_by_source.get(url, 0) + 1
        return True

    def _not_yet(self, level: int, response: httpx.Response, asked: float) -> bool:
        failure = refused(response)
        if failure.gone or response.status_code not in (404, 503) or error_code(response) not in ("not_yet", "unknown"):
            raise failure
        held = int(response.headers.get(HELD_HEADER, "0") or 0)
        with self.lock:
            self.chain.not_yet(level, held, time.monotonic())
        if time.monotonic() - asked < 0.05:  # a source that does not long-poll: do not spin on it
            self._pause(0.05)
        return False

    def _fail(self, level: int, index: int, failure: SourceFailed) -> None:
        url = self.sources[level]
        line = f"v{self.version} chunk {index} from {url}: {failure}"
        self._suspect(url, failure)
        with self.lock:
            self.stats.failovers.append(line)
            if failure.gone:
                raise self._superseded(url, failure)
            step = self.chain.fail(level, time.monotonic())
        if step == "moved":
            log.warning("%s; moving on to %s", line, self.sources[level + 1])
        if step != "retry":
            return
        log.warning("%s; retrying (no further source)", line)
        self._pause(0.5)

    def _too_slow(self, url: str, received: int, elapsed_s: float, floor: float) -> SourceFailed:
        if self._reports(url):
            self.suspects.too_slow(url, received / elapsed_s)
        return below_floor(received, elapsed_s, floor)

    def _suspect(self, url: str, failure: SourceFailed) -> None:
        if failure.suspect and self._reports(url):
            self.suspects.failed(url, silent=failure.silent)

    def _reports(self, url: str) -> bool:
        """Whether ``url`` is a relay this node keeps suspicions of: never the learner (the last
        source, always kept in the chain and no relay the coordinator could take out)."""
        return self.suspects is not None and url != self.sources[-1]

    def _superseded(self, url: str, failure: SourceFailed) -> VersionSuperseded:
        return VersionSuperseded(f"v{self.version} is no longer served by {url} ({failure}); fetch a newer version")


    def _pause(self, seconds: float) -> None:
        seconds = max(0.0, min(seconds, self.deadline - time.monotonic()))
        if self.cancel is not None:
            self.cancel.wait(seconds)
        else:
            time.sleep(seconds)
