"""The rollout worker: joins a run by URL, samples groups, submits them version-tagged.

Protocols (Echo, arXiv 2508.05387):

* ``sync`` / ``pull`` — *sequential pull*: before every lease the worker makes sure it holds the
  newest published version (a blocking fetch when there is one);
* ``async`` — *push-pull*: a background thread downloads each newly announced version (the
  coordinator announces it in every heartbeat and lease reply) while the main thread keeps
  generating; the new weights are swapped in between two requests, never during one.

Under every protocol a lease's results are submitted on a thread of their own while the worker
already asks for its next lease (:mod:`echo2.rollout.courier`); an async worker whose round trips
are long against its leases asks for that one while it still generates (:mod:`echo2.rollout.lease_ahead`).

Weights arrive as verified chunks (:mod:`echo2.broadcast`) from the sources the coordinator
names for this worker: a parent relay first, the learner last. Unless started with
``relay=None``, the worker also serves the chunks it holds to its own children in the plan.

The worker never imports the learner: it needs a model, a tokenizer and the wire protocol,
nothing else. It never sees a reference answer and reports no rewards: leases carry prompt text
only, and the coordinator scores the submitted tokens itself (:mod:`echo2.coordinator.scoring`).
"""

from __future__ import annotations

import logging
import signal
import socket
import ssl
import threading
import time
import zlib

import httpx
import torch

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.delta_fetch import fetch_by_delta
from echo2.broadcast.downloader import BroadcastError, VersionSuperseded, fetch_version
from echo2.broadcast.suspects import SuspectSources
from echo2.broadcast.payload import CorruptPayload
from echo2.broadcast.relay import RelayServer
from echo2.broadcast.throttle import Throttle
from echo2.episodes import Episode, observation_ids, run_episodes
from echo2.modeling import load_tokenizer, pin_threads
from echo2.protocol import (
    LEARNER_SOURCE,
    Completion,
    GroupResult,
    Heartbeat,
    LeaseRequest,
    LeaseResponse,
    RegisterRequest,
    RegisterResponse,
    RespondItem,
    RespondRequest,
    RunSpec,
    SubmitRequest,
    TimelineEvent,
)
from echo2.rollout.client import CoordinatorClient, CoordinatorUnreachable, RequestRefused, SessionLost
from echo2.rollout.courier import Courier
from echo2.rollout.engines import load_engine
from echo2.rollout.lease_ahead import LeaseAhead
from echo2.rollout.options import RelayOptions

log = logging.getLogger("echo2.worker")



def _retry_pause_s(error: Exception) -> float:
    """Seconds before fetching again after ``error``: none when the version was only outdated
    (a newer one is out: ask for it now), a little after a refused request, else a second."""
    if isinstance(error, VersionSuperseded):
        return 0.0
    return 0.1 if isinstance(error, RequestRefused) else 1.0


def sampling_seed(run_seed: int, worker_id: str) -> int:
    """The seed of a worker's sampling generator: the run's seed and the worker's id, the same in
    every process (``zlib.crc32``, not ``hash()``, which changes with ``PYTHONHASHSEED``)."""
    return run_seed * 1000 + zlib.crc32(worker_id.encode()) % 1000


class RolloutWorker:
    def __init__(self, url: str, token: str, *, name: str | None = None, threads: int = 1,
                 fetch_timeout_s: float = 120.0, give_up_after_s: float | None = None,
                 relay: RelayOptions | None = RelayOptions(), price_per_hour: float = 0.0,
                 worker_class: str = "", throughput_factor: float = 1.0, device: str = "cpu",
                 verify: ssl.SSLContext | bool = True) -> None:
        if not 0 < throughput_factor <= 1:
            raise ValueError(f"throughput_factor must be in (0, 1], got {throughput_factor}")
        # verify: how the coordinator's and the relays' certificates are checked (echo2.tls)
        self.client = CoordinatorClient(url, token, give_up_after_s=give_up_after_s, verify=verify)
        self.relay_options = relay
        self.price_per_hour, self.worker_class, self.throughput_factor = price_per_hour, worker_class, throughput_factor
        self.device = device
        self.store = ChunkStore()
        self.deltas = ChunkStore()  # delta versions (broadcast.encoding: delta), relayed like the rest
        self.suspects = SuspectSources()  # relays this worker could not reach lately, skipped a while
        self.relay: RelayServer | None = None
        self.http = httpx.Client(limits=httpx.Limits(max_connections=8), verify=verify)  # every chunk fetch
        self.name = name or f"{socket.gethostname()}-{id(self) % 10000}"
        self.threads = threads
        self.fetch_timeout_s = fetch_timeout_s
        self.version = -1
        self.latest_version = 0
        self.stop = threading.Event()
        self.coordinator_said_stop = False
        self._finished = threading.Event()
        self._events: list[TimelineEvent] = []
        self._events_lock = threading.Lock()
        self._staged: tuple[int, bytes, str] | None = None
        self._staged_ready = threading.Condition()
        self._session_lost = threading.Event()
        self._epoch = 0  # bumped on every re-registration: fetches started before it are discarded
        self._fetches_cancelled = threading.Event()  # set (and replaced) when the session is lost: stops them
        self.courier = Courier(self.client, self._lose_session)  # submissions, sent while the next lease is asked for
        self.ahead = LeaseAhead(self.client)  # async: the next lease, asked for while this one generates

    # ------------------------------------------------------------------ setup
    def _setup(self) -> RunSpec:
        options = self.relay_options
        if options is not None:
            # peers present the broadcast credential (chunks only), never the run token
            self.relay = RelayServer(self.store, options.bind_host, options.port,
                                     token=lambda: self.client.broadcast_token,
                                     throttle=Throttle(options.upload_bytes_per_s, latency_s=options.latency_s),
                                     advertise_host=options.advertise_host, certfile=options.certfile,
                                     keyfile=options.keyfile, deltas=self.deltas).start()
        registration = self._register()
        spec = registration.spec
        log.info("registered with %s as %s (protocol %s, S=%d)", self.client.url, registration.worker_id,
                 spec.protocol, spec.staleness)
        pin_threads(self.threads)
        torch.manual_seed(spec.seed)
        self.spec = spec
        # heartbeats start now: loading the model and the first weights can outlast the dead-worker timeout
        threading.Thread(target=self._heartbeats, daemon=True, name="echo2-heartbeats").start()
        self.tokenizer = load_tokenizer(spec.model)
        self.engine = load_engine(spec, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id, self.device)
        self.generator = self.engine.generator(sampling_seed(spec.seed, registration.worker_id))
        self._fetch_first_weights()
        return spec

    def _registration(self) -> RegisterRequest:
        options = self.relay_options
        return RegisterRequest(name=self.name, relay_url=self.relay.url if self.relay else None,
                               upload_bytes_per_s=options.upload_bytes_per_s if options else None,
                               price_per_hour=self.price_per_hour, worker_class=self.worker_class)

    def _register(self) -> RegisterResponse:
        """Register (again), and have the relay answer as this worker from then on: the coordinator
        asks it who it is before it sends any peer there (:mod:`echo2.coordinator.relay_check`)."""
        registration = self.client.register(self._registration())
        if self.relay is not None:
            self.relay.identity = registration.worker_id
        return registration

    def _rejoin(self) -> None:
        """Register again after the coordinator forgot this worker (a resumed learner, or a
        heartbeat gap long enough to be declared dead), and start over from its current version:
        after a resume, version numbers repeat with other weights, so nothing held is kept."""
        self._register_anew()
        self._fetch_first_weights()

    def _register_anew(self) -> None:
        self._session_lost.clear()
        registration = self._register()
        self._epoch += 1
        self.ahead.drop()
        self._cancel_fetches()
        with self._staged_ready:
            self._staged = None
        for store in (self.store, self.deltas):
            store.clear()
        with self._events_lock:  # they name versions of a learner that is gone (the coordinator refuses them)
            self._events.clear()
        self.version, self.latest_version = -1, 0
        log.info("registered again with %s as %s", self.client.url, registration.worker_id)

    def _lose_session(self) -> None:
        """The coordinator forgot this worker: the main loop registers again; fetches stop now."""
        self._session_lost.set()
        self._cancel_fetches()

    def _cancel_fetches(self) -> None:
        """Stop the fetches in flight, and the wait for one (:meth:`_swap_in_staged`): once the
        coordinator forgot this worker they ask for versions of a learner that is gone (a resumed
        one may never publish them again), which would otherwise hold the worker until the fetch
        timeout before it registers again."""
        self._fetches_cancelled.set()
        self._fetches_cancelled = threading.Event()
        with self._staged_ready:
            self._staged_ready.notify_all()

    def _record(self, kind: str, start: float, end: float, version: int, delta: bool = False) -> None:
        with self._events_lock:
            self._events.append(TimelineEvent(kind=kind, start=start, end=end, version=version, delta=delta))

    def _drain_events(self) -> list[TimelineEvent]:
        with self._events_lock:
            events, self._events = self._events[:1000], self._events[1000:]
            return events

    # ------------------------------------------------------------------ weights
    def _fetch_newest(self, held: int) -> tuple[int, bytes, str] | None:
        """Download the newest version if it is newer than ``held``: (version, payload, sha256).

        The slow-link delay is added after the transfer, as transfer time: the version asked for
        is the one that arrives (and the chunks already relayed on meanwhile)."""
        info = self.client.version()
        self.latest_version = max(self.latest_version, info.version)
        if info.version <= held:
            return None
        started = time.time()
        sources = [self.client.url if source == LEARNER_SOURCE else source for source in info.sources]
        options = {"token": self.client.broadcast_token, "timeout_s": self.spec.broadcast_timeout_s,
                   "stall_s": self.spec.broadcast_stall_s, "client": self.http, "cancel": self._fetches_cancelled,
                   "suspects": self.suspects}
        payload = fetch_by_delta(info, sources, self.store, self.deltas, **options)
        by_delta = payload is not None
        if payload is None:
            payload = fetch_version(info.version, sources, self.store, expected_sha256=info.sha256, **options).payload
        if self.spec.fetch_delay_s:
            time.sleep(self.spec.fetch_delay_s)
        self._record("fetch", started, time.time(), info.version, delta=by_delta)
        assert payload is not None
        manifest, expected = self.store.manifest(info.version), "lora" if self.spec.adapter else "full"
        if manifest is None or manifest.kind != expected:
            raise CorruptPayload(f"v{info.version} is not a {expected!r} payload, which this run sends")
        return info.version, payload, info.sha256

    def _fetch_newest_blocking(self) -> None:
        fetched = self._fetch_newest(self.version)
        if fetched is not None:
            self.engine.load(fetched[1], fetched[2])
            self.version = fetched[0]

    def _fetch_first_weights(self) -> None:
        """The weights to start with (on registering, and again after registering anew). A failed
        fetch is retried as the lease loop retries one — at once when the version was only
        outdated (a relay went on to a newer one while this worker loaded its model), else after a
        pause — until it succeeds or the worker is asked to stop: without weights there is nothing
        to do, and a worker must not die of a relay that moved on, nor of being declared dead
        meanwhile (a partition during its first download): it registers again and goes on."""
        while not self.stop.is_set():
            try:
                if self._try_fetch_newest("the first weights"):
                    return
            except SessionLost as error:
                log.warning("the coordinator forgot this worker before it had its first weights (%s); "
                            "registering again", error.detail)
                self._register_anew()

    def _try_fetch_newest(self, what: str) -> bool:
        """One blocking fetch of the newest version; on a failure the next try can mend (corrupt
        chunks, a relay gone or moved on), log it, pause as :func:`_retry_pause_s` says, return False."""
        try:
            self._fetch_newest_blocking()
            return True
        except (CorruptPayload, BroadcastError) as error:
            log.warning("fetching %s failed (%s); will retry", what, error)
            self.stop.wait(_retry_pause_s(error))
            return False

    def _background_fetcher(self) -> None:
        """Async protocol: download announced versions while the main thread generates."""
        fetched = self.version  # newest version downloaded by this thread (staged or already swapped in)
        epoch = self._epoch
        while not self.stop.is_set():
            if epoch != self._epoch:  # re-registered: versions start over
                fetched, epoch = self.version, self._epoch
            target = self.latest_version
            if target <= fetched:
                self.stop.wait(0.01)
                continue
            try:
                staged = self._fetch_newest(fetched)
            except (CoordinatorUnreachable, RequestRefused, CorruptPayload, BroadcastError) as error:
                log.warning("background fetch of v%d failed (%s); will retry", target, error)
                self.stop.wait(_retry_pause_s(error))
                continue
            except Exception:  # noqa: BLE001 - were this thread to end, the worker would hold one version for good
                log.exception("background fetch of v%d failed unexpectedly; will retry", target)
                self.stop.wait(1.0)
                continue
            if staged is None or epoch != self._epoch:
                self.stop.wait(0.01)
                continue
            fetched = staged[0]
            with self._staged_ready:
                self._staged = staged
                self._staged_ready.notify_all()

    def _swap_in_staged(self, wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        with self._staged_ready:
            # short slices: a stop request (SIGTERM) is an Event nobody notifies this condition of
            while (self._staged is None and not self.stop.is_set() and not self._session_lost.is_set()
                   and time.monotonic() < deadline):
                self._staged_ready.wait(min(0.5, deadline - time.monotonic()))
            staged, self._staged = self._staged, None
        if staged is not None and staged[0] > self.version:
            self.engine.load(staged[1], staged[2])
            self.version = staged[0]

    def _heartbeats(self) -> None:
        """Until the worker has finished (not merely been asked to stop: a preempted worker keeps
        beating while it completes the request in hand, so that it is not declared dead)."""
        while not self._finished.wait(self.spec.heartbeat_interval_s):
            try:
                measured = self.relay.throttle.measured_rate() if self.relay is not None else None
                reply = self.client.heartbeat(Heartbeat(version=max(self.version, 0), events=self._drain_events(),
                                                        upload_bytes_per_s=measured))
            except SessionLost:
                self._lose_session()
                continue
            except (CoordinatorUnreachable, RequestRefused) as error:
                log.warning("heartbeat failed: %s", error)
                continue
            self.latest_version = max(self.latest_version, reply.latest_version)
            if reply.stop:
                self.coordinator_said_stop = True
                self.stop.set()

    # ------------------------------------------------------------------ work
    def _episodes(self, lease: LeaseResponse) -> list[Episode]:
        """One episode per row (G per prompt): a single sample for a single-turn task; else turns,
        the coordinator answering between them, newer weights swapped in between turns (async)."""
        group_size, spec = self.spec.group_size, self.spec
        slots = [p.slot for p in lease.prompts for _ in range(group_size)]
        prompt_ids = [self.tokenizer(p.prompt)["input_ids"] for p in lease.prompts for _ in range(group_size)]

        def respond(rows: list[int], replies: list[list[str]]) -> list[str | None]:
            items = [RespondItem(slot=slots[row], replies=said) for row, said in zip(rows, replies)]
            return self.client.respond(RespondRequest(lease_id=lease.lease_id, items=items)).observations

        swap = self._swap_in_staged if spec.protocol == "async" and spec.swap_between_turns else None
        window = getattr(self.engine, "max_context", None)  # a next turn must fit whole in the model's window
        return run_episodes(prompt_ids, sample=lambda contexts: self.engine.generate(contexts, self.generator),
                            respond=respond, encode=lambda text: observation_ids(self.tokenizer, text),
                            decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
                            max_turns=spec.max_turns, version=lambda: self.version, between_turns=swap,
                            max_context=window - spec.max_new_tokens if window else None,
                            eos_id=self.tokenizer.eos_token_id)

    def _generate(self, lease: LeaseResponse) -> SubmitRequest:
        group_size, multi_turn = self.spec.group_size, self.spec.max_turns > 1
        started, clock, cpu = time.time(), time.perf_counter(), time.thread_time()
        episodes = self._episodes(lease)
        groups = []
        for index, prompt in enumerate(lease.prompts):
            groups.append(GroupResult(slot=prompt.slot, completions=[
                Completion(token_ids=e.token_ids, logprobs=e.logprobs, mask=e.mask if 0 in e.mask else None,
                           turn_versions=e.turn_versions if multi_turn else None)
                for e in episodes[index * group_size : (index + 1) * group_size]
            ]))
        seconds = time.perf_counter() - clock
        if self.throughput_factor < 1:
            # emulate a device `factor` times as fast as this core: the lease takes the compute it used
            # (this thread's CPU time, which other processes on the core do not inflate) / factor
            self.stop.wait(max(0.0, (time.thread_time() - cpu) / self.throughput_factor - seconds))
            seconds = time.perf_counter() - clock
        self._record("generate", started, time.time(), self.version)
        self.ahead.generated(seconds)
        assert lease.lease_id is not None and lease.version is not None
        return SubmitRequest(lease_id=lease.lease_id, version=lease.version, groups=groups, generate_seconds=seconds,
                             events=self._drain_events())

    def _work_once(self, spec: RunSpec) -> bool:
        """Take the lease asked for ahead, or refresh weights as the protocol says and lease; ask
        for the next one ahead when the protocol allows; generate; hand the results to the courier
        (:mod:`echo2.rollout.courier`). False: the run is over."""
        lease = self.ahead.take()
        if lease is None:
            if spec.protocol == "async":
                self._swap_in_staged()
            elif not self._try_fetch_newest("the newest weights"):
                return True
            lease = self.ahead.lease(self._lease_request(spec))
        self.latest_version = max(self.latest_version, lease.latest_version)
        if lease.status == "stop":
            self.coordinator_said_stop = True
            return False
        if lease.status == "refresh" and spec.protocol == "async":
            self._swap_in_staged(wait_s=self.fetch_timeout_s)
        if lease.status != "granted":
            return True
        if self._may_ask_ahead(spec):
            self.ahead.ask(self._lease_request(spec))
        try:
            request = self._generate(lease)
        except RequestRefused as error:  # e.g. the lease expired mid-episode (the environment's answers)
            log.warning("lease %s refused while generating: %s", lease.lease_id, error.detail)
            return True
        self.courier.send(request)
        return True

    def _lease_request(self, spec: RunSpec) -> LeaseRequest:
        return LeaseRequest(version=self.version, max_groups=spec.groups_per_lease)

    def _may_ask_ahead(self, spec: RunSpec) -> bool:
        """Async only, when round trips are long against leases, and only when the lease asked for
        will be generated with the weights held now: no fetched version waiting to be swapped in,
        no swap between an episode's turns (:mod:`echo2.rollout.lease_ahead`)."""
        swaps_mid_lease = spec.swap_between_turns and spec.max_turns > 1
        return (spec.protocol == "async" and not swaps_mid_lease and self._staged is None and not self.stop.is_set()
                and self.ahead.worth_it)

    def run(self) -> None:
        """Work until the coordinator says the run is over (or SIGTERM/SIGINT)."""
        spec = self._setup()
        if spec.protocol == "async":
            threading.Thread(target=self._background_fetcher, daemon=True, name="echo2-fetcher").start()
        try:
            while not self.stop.is_set():
                try:
                    if self._session_lost.is_set():
                        self._rejoin()
                    if not self._work_once(spec):
                        break
                except SessionLost as error:
                    log.warning("the coordinator forgot this worker (%s); registering again", error.detail)
                    self._session_lost.set()
        finally:
            self.stop.set()
            self.courier.close()  # the results in hand go out before the worker leaves
            self.ahead.close()
            self._finished.set()
            if not self.coordinator_said_stop:
                self.client.deregister()  # preempted or failed: hand unfinished leases back at once
            self.client.close()
            if self.relay is not None:
                self.relay.stop()
            self.store.close()
            self.deltas.close()
            self.http.close()
        log.info("worker %s done at version %d", self.name, self.version)


def install_signal_handlers(worker: RolloutWorker) -> None:
    """SIGTERM/SIGINT: finish the request in hand, then leave (preemption-friendly)."""

    def _stop(signum, frame):  # noqa: ARG001
        log.info("signal %d: finishing the current request, then leaving", signum)
        worker.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
