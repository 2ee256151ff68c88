"""A worker's weights: fetched as verified chunks, staged in the background (async), swapped in
between leases — the protocol's decisions are :class:`echo2.core.worker_protocol.WorkerProtocol`'s,
this module carries them out with threads and HTTP.

Weights arrive from the sources the coordinator names for this worker (a parent relay first, the
learner last: :mod:`echo2.broadcast.downloader`), by delta when the run sends deltas. When the
coordinator forgets the worker (:meth:`WorkerWeights.forget`) only what it vouches for is kept:
after a learner's resume, version numbers repeat with other weights.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping

import httpx

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.delta_fetch import fetch_by_delta
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastError, VersionSuperseded
from echo2.broadcast.payload import CorruptPayload, PayloadKind
from echo2.broadcast.suspects import SuspectSources
from echo2.core.worker_protocol import WorkerProtocol
from echo2.protocol import LEARNER_SOURCE, RunSpec, VersionInfo
from echo2.rollout.client import CoordinatorClient, CoordinatorUnreachable, RequestRefused, SessionLost

log = logging.getLogger("echo2.worker")

Fetched = tuple[int, bytes, str]
"""A downloaded version: (version, payload, sha256)."""


def payload_kind(spec: RunSpec) -> PayloadKind:
    """What this run's versions carry: a training service's sampler bundle, one LoRA adapter, or all the weights."""
    return "bundle" if spec.sampler_bundles else "lora" if spec.adapter else "full"


def vouched_hashes(info: VersionInfo) -> dict[int, str]:
    """The versions whose hashes the coordinator announces now: the newest, and (a run sending
    deltas) the kept versions a delta catch-up may start from."""
    return {step.version: step.sha256 for step in info.catch_up} | {info.version: info.sha256}


def retry_pause_s(error: Exception) -> float:
    """Seconds before fetching again after ``error``: none when the version was only outdated
    (a newer one is out: ask for it now), a little after a refused request, else a second."""
    if isinstance(error, VersionSuperseded):
        return 0.0
    return 0.1 if isinstance(error, RequestRefused) else 1.0


class WorkerWeights:
    def __init__(self, client: CoordinatorClient, stop: threading.Event, record: Callable[..., None],
                 verify: ssl.SSLContext | bool) -> None:
        self.client, self.stop, self.record = client, stop, record
        self.store = ChunkStore()
        self.deltas = ChunkStore()  # delta versions (broadcast.encoding: delta), relayed like the rest
        self.suspects = SuspectSources()  # relays this worker could not reach lately, skipped a while
        self.http = httpx.Client(limits=httpx.Limits(max_connections=8), verify=verify)  # every chunk fetch
        self.protocol = WorkerProtocol("sync")
        """The protocol's state and decisions (replaced by :meth:`start`); read and changed under :attr:`changed`."""
        self.changed = threading.Condition()
        self._staged: Fetched | None = None
        self._epoch = 0  # bumped when the coordinator forgets this worker: fetches started before are discarded
        self._cancelled = threading.Event()  # set (and replaced) by :meth:`cancel`: stops the fetches in flight

    def start(self, spec: RunSpec, load: Callable[[bytes, str], None], lost: threading.Event) -> None:
        """The run's protocol, the engine's loader and the session-lost flag (known once registered)."""
        self.spec, self.load, self.lost = spec, load, lost
        self.protocol = WorkerProtocol(spec.protocol, swaps_mid_lease=(spec.swap_between_turns and spec.max_turns > 1)
                                       or spec.swap_between_steps)

    @property
    def version(self) -> int:
        return self.protocol.version

    def heard(self, version: int) -> None:
        with self.changed:
            if self.protocol.heard(version):
                self.changed.notify_all()

    # ------------------------------------------------------------------ fetching
    def fetch_newest(self, held: int) -> Fetched | None:
        """Download the newest version if it is newer than ``held``. The slow-link delay is added
        after the transfer, as transfer time: the version asked for is the one that arrives."""
        info = self.client.version()
        self.heard(info.version)
        if info.version <= held:
            return None
        started = time.time()
        sources = [self.client.url if source == LEARNER_SOURCE else source for source in info.sources]
        options = {"token": self.client.broadcast_token, "timeout_s": self.spec.broadcast_timeout_s,
                   "stall_s": self.spec.broadcast_stall_s, "client": self.http, "cancel": self._cancelled,
                   "suspects": self.suspects, "source_rates": info.source_rates}
        payload = fetch_by_delta(info, sources, self.store, self.deltas, **options)
        by_delta = payload is not None
        if payload is None:
            payload = fetch_version(info.version, sources, self.store, expected_sha256=info.sha256, **options).payload
        if self.spec.fetch_delay_s:
            time.sleep(self.spec.fetch_delay_s)
        self.record("fetch", started, time.time(), info.version, delta=by_delta)
        assert payload is not None
        manifest, expected = self.store.manifest(info.version), payload_kind(self.spec)
        if manifest is None or manifest.kind != expected:
            raise CorruptPayload(f"v{info.version} is not a {expected!r} payload, which this run sends")
        return info.version, payload, info.sha256

    def try_fetch_newest(self, what: str) -> bool:
        """One blocking fetch of the newest version, loaded; on a failure the next try can mend
        (corrupt chunks, a relay gone or moved on): log it, pause as :func:`retry_pause_s` says,
        return False."""
        try:
            fetched = self.fetch_newest(self.version)
        except (CorruptPayload, BroadcastError) as error:
            log.warning("fetching %s failed (%s); will retry", what, error)
            self.stop.wait(retry_pause_s(error))
            return False
        if fetched is not None:
            self.load(fetched[1], fetched[2])
            with self.changed:
                self.protocol.loaded(fetched[0])
        return True

    def background(self) -> None:
        """Async protocol: download announced versions while the main thread generates."""
        while not self.stop.is_set():
            with self.changed:
                if not self.changed.wait_for(lambda: self.protocol.wants_fetch() or self.stop.is_set(), 0.5):
                    continue
                if self.stop.is_set():
                    return
                self.protocol.fetch_started()
                epoch, held = self._epoch, self.protocol.fetched
            staged = self._fetch_in_background(max(held, self.version))
            with self.changed:
                if epoch != self._epoch:  # the coordinator forgot this worker meanwhile: versions start over
                    continue
                if staged is not None:
                    self._staged = staged
                self.protocol.fetch_ended(staged[0] if staged is not None else None)
                self.changed.notify_all()

    def _fetch_in_background(self, held: int) -> Fetched | None:
        """One try; a failure is logged and paused after (were this thread to end, the worker would
        hold one version for good)."""
        try:
            return self.fetch_newest(held)
        except SessionLost:  # the coordinator forgot this worker: no fetch until the main loop registers again
            self.lost.set()
            while self.lost.is_set() and not self.stop.wait(0.2):
                pass
        except (CoordinatorUnreachable, RequestRefused, CorruptPayload, BroadcastError) as error:
            log.warning("background fetch after v%d failed (%s); will retry", held, error)
            self.stop.wait(retry_pause_s(error))
        except Exception:  # noqa: BLE001
            log.exception("background fetch after v%d failed unexpectedly; will retry", held)
            self.stop.wait(1.0)
        return None

    def held(self) -> int:
        """The version the engine holds now (:class:`echo2.model.sampling.WeightUpdates`)."""
        return self.protocol.version

    def between_steps(self) -> int:
        """In-flight updates (``rollout.swap_between_steps``): a staged version swapped in between two
        decoding steps; the version held after (:class:`echo2.model.sampling.WeightUpdates`)."""
        if self.protocol.staged is not None:  # read without the lock: swap_in re-checks under it
            self.swap_in()
        return self.protocol.version

    def swap_in(self, wait_s: float = 0.0) -> None:
        """Load the staged version, waiting up to ``wait_s`` for one (a ``refresh`` answer); in short
        slices: a stop request (SIGTERM) is an Event nobody notifies this condition of."""
        deadline = time.monotonic() + wait_s
        with self.changed:
            while (self.protocol.staged is None and not self.stop.is_set() and not self.lost.is_set()
                   and time.monotonic() < deadline):
                self.changed.wait(min(0.5, deadline - time.monotonic()))
            staged, self._staged = self._staged, None
            version = self.protocol.swap_in()
        if version is not None and staged is not None:
            self.load(staged[1], staged[2])

    # ------------------------------------------------------------------ a forgotten session
    def cancel(self) -> None:
        """Stop the fetches in flight, and the wait for one: once the coordinator forgot this
        worker they ask for versions of a learner that is gone (a resumed one may never publish
        them again), which would otherwise hold the worker until the fetch timeout."""
        self._cancelled.set()
        self._cancelled = threading.Event()
        with self.changed:
            self.changed.notify_all()

    def forget(self, vouched: Mapping[int, str] | None = None) -> None:
        """Registered anew: the protocol starts over (:meth:`WorkerProtocol.forget`), and of the
        versions held only those whose hash is in ``vouched`` (:func:`vouched_hashes` of the
        coordinator's answer now) are kept: loaded again without a byte on the wire, caught up
        from by delta, or — cut off mid-download — resumed from the chunks already verified. A
        worker declared dead over a partition or a long pause had to download the whole model
        again; after a resume, where version numbers repeat with other weights, the hashes differ
        and nothing is kept (the store's newest versions would shut the new ones out). Without
        ``vouched``, the coordinator is asked (the newest version's announcement)."""
        if vouched is None:
            vouched = self._vouched_now()
        self._epoch += 1
        self.cancel()
        with self.changed:
            self._staged = None
            self.protocol.forget()
        self.deltas.clear()
        kept = [version for version in self.store.versions()
                if (manifest := self.store.manifest(version)) is not None and vouched.get(version) == manifest.sha256]
        self.store.retain(kept)
        if kept:
            log.info("kept %s, which the coordinator still announces: not fetched again",
                     ", ".join(f"v{v} ({self.store.held(v)}/{self.store.manifest(v).num_chunks} chunks)" for v in kept))

    def _vouched_now(self) -> dict[int, str]:
        try:
            return vouched_hashes(self.client.version())
        except (CoordinatorUnreachable, RequestRefused) as error:  # none published yet, or out of reach again
            log.info("keeping no version held (%s)", error)
            return {}

    def close(self) -> None:
        self.store.close()
        self.deltas.close()
        self.http.close()
