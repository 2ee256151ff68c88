"""The rollout worker: joins a run by URL, samples groups, submits them version-tagged.

Its decisions — when to fetch weights and how (Echo's sequential pull, or push-pull in the
background), when to swap them in, what to do with a lease answer, whether to ask for the next
lease ahead — are the protocol core's (:mod:`echo2.core.worker_protocol`, which the simulator's
workers follow too); this module is the threads and HTTP around it: a main thread that leases,
generates (:mod:`echo2.rollout.lease_generation`) and hands results to the courier; a heartbeat
thread; the weights' background fetcher (:mod:`echo2.rollout.weights`).

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

import torch

from echo2.broadcast.relay import RelayOptions, RelayServer
from echo2.broadcast.suspects import SuspectSources
from echo2.broadcast.throttle import Throttle
from echo2.model import heap
from echo2.model.loading import load_tokenizer, pin_threads
from echo2.protocol import (
    Heartbeat,
    LeaseFailure,
    LeaseRequest,
    LeaseResponse,
    RegisterRequest,
    RegisterResponse,
    RunSpec,
    SlowSource,
    SubmitRequest,
)
from echo2.rollout.client import CoordinatorClient, CoordinatorUnreachable, RequestRefused, SessionLost
from echo2.rollout.courier import Courier
from echo2.rollout.engines import load_engine
from echo2.rollout.lease_ahead import Answered, LeaseAhead
from echo2.rollout.lease_generation import LeaseGenerator
from echo2.rollout.timeline import WorkerTimeline
from echo2.rollout.weights import WorkerWeights

log = logging.getLogger("echo2.worker")


class RolloutWorker:
    def __init__(self, url: str, token: str, *, name: str | None = None, threads: int = 1,
                 fetch_timeout_s: float = 120.0, give_up_after_s: float | None = None,
                 relay: RelayOptions | None = RelayOptions(), price_per_hour: float = 0.0,
                 worker_class: str = "", throughput_factor: float = 1.0, device: str = "cpu",
                 verify: ssl.SSLContext | bool = True) -> None:
        if not 0 < throughput_factor <= 1:
            raise ValueError(f"throughput_factor must be in (0, 1], got {throughput_factor}")
        # verify: how the coordinator's and the relays' certificates are checked (echo2.net.tls)
        self.client = CoordinatorClient(url, token, give_up_after_s=give_up_after_s, verify=verify)
        self.relay_options, self.relay = relay, None
        self.price_per_hour, self.worker_class, self.throughput_factor = price_per_hour, worker_class, throughput_factor
        self.device, self.threads, self.fetch_timeout_s = device, threads, fetch_timeout_s
        self.name = name or f"{socket.gethostname()}-{id(self) % 10000}"
        self.stop = threading.Event()
        self.coordinator_said_stop = False
        self.timeline = WorkerTimeline()
        self.weights = WorkerWeights(self.client, self.stop, self.timeline.record, verify)
        self.session_lost = threading.Event()
        self._finished = threading.Event()
        self.courier = Courier(self.client, self._lose_session)  # submissions, sent while the next lease is asked for
        self.ahead = LeaseAhead(self.client, self.stop.wait)  # async: the next lease, asked while one generates

    @property
    def version(self) -> int:
        return self.weights.version

    # ------------------------------------------------------------------ session
    def _setup(self) -> RunSpec:
        options = self.relay_options
        if options is not None:
            # peers present the broadcast credential (chunks only), never the run token
            self.relay = RelayServer(self.weights.store, options.bind_host, options.port,
                                     token=lambda: self.client.broadcast_token,
                                     throttle=Throttle(options.upload_bytes_per_s, latency_s=options.latency_s),
                                     advertise_host=options.advertise_host, certfile=options.certfile,
                                     keyfile=options.keyfile, deltas=self.weights.deltas).start()
        registration = self._register()
        spec = self.spec = registration.spec
        self.weights.start(spec, lambda payload, sha256: self.engine.load(payload, sha256), self.session_lost)
        log.info("registered with %s as %s (protocol %s, S=%d)", self.client.url, registration.worker_id,
                 spec.protocol, spec.staleness)
        pin_threads(self.threads)
        torch.manual_seed(spec.seed)
        # heartbeats start now: loading the model and the first weights can outlast the dead-worker timeout
        threading.Thread(target=self._heartbeats, daemon=True, name="echo2-heartbeats").start()
        tokenizer = load_tokenizer(spec.model)
        self.engine = load_engine(spec, tokenizer.eos_token_id, tokenizer.pad_token_id, self.device)
        self.generation = LeaseGenerator(spec, self.engine, tokenizer, self.client, self.stop, self.throughput_factor)
        self._fetch_first_weights()
        return spec

    def _register(self) -> RegisterResponse:
        """Register (again), and have the relay answer as this worker from then on: the coordinator
        asks it who it is before it sends any peer there (:mod:`echo2.coordinator.relay_check`)."""
        options = self.relay_options
        registration = self.client.register(RegisterRequest(
            name=self.name, relay_url=self.relay.url if self.relay else None,
            upload_bytes_per_s=options.upload_bytes_per_s if options else None,
            price_per_hour=self.price_per_hour, worker_class=self.worker_class))
        if self.relay is not None:
            self.relay.identity = registration.worker_id
        return registration

    def _register_anew(self) -> None:
        """Register again after the coordinator forgot this worker (a resumed learner, or a
        heartbeat gap long enough to be declared dead), and start over, keeping only the versions
        whose hashes the coordinator still announces (:meth:`WorkerWeights.forget`)."""
        self.session_lost.clear()
        registration = self._register()
        self.ahead.drop()
        self.weights.forget()
        self.timeline.clear()
        log.info("registered again with %s as %s", self.client.url, registration.worker_id)

    def _lose_session(self) -> None:
        """The coordinator forgot this worker: the main loop registers again; fetches stop now."""
        self.session_lost.set()
        self.weights.cancel()

    def _fetch_first_weights(self) -> None:
        """The weights to start with (on registering, and again after registering anew), retried
        until they arrive or the worker is asked to stop: without weights there is nothing to do,
        and a worker must not die of a relay that moved on, nor of being declared dead meanwhile
        (a partition during its first download): it registers again and goes on."""
        while not self.stop.is_set():
            try:
                if self.weights.try_fetch_newest("the first weights"):
                    return
            except SessionLost as error:
                log.warning("the coordinator forgot this worker before it had its first weights (%s); "
                            "registering again", error.detail)
                self._register_anew()

    def _heartbeats(self) -> None:
        """Until the worker has finished (not merely been asked to stop: a preempted worker keeps
        beating while it completes the request in hand, so that it is not declared dead)."""
        while not self._finished.wait(self.spec.heartbeat_interval_s):
            try:
                reply = self.client.heartbeat(heartbeat(self.version, self.timeline, self.relay, self.weights.suspects))
            except SessionLost:
                self._lose_session()
                continue
            except (CoordinatorUnreachable, RequestRefused) as error:
                log.warning("heartbeat failed: %s", error)
                continue
            self.weights.heard(reply.latest_version)
            if reply.stop:
                self.coordinator_said_stop = True
                self.stop.set()

    # ------------------------------------------------------------------ work
    def _work_once(self) -> bool:
        """Take the lease asked for ahead, or get ready as the protocol says and ask; then do what
        the answer calls for. False: the run is over."""
        protocol = self.weights.protocol
        answered = self.ahead.take() or self._lease_now()
        if answered is None:
            return True
        lease, round_trip_s = answered
        with self.weights.changed:
            action = protocol.answered(lease.status, lease.latest_version, round_trip_s)
            ask_ahead = action == "generate" and protocol.ask_ahead(leaving=self.stop.is_set())
        self.weights.heard(lease.latest_version)  # wakes the background fetch
        if action == "stop":
            self.coordinator_said_stop = True
            return False
        if action == "wait_for_staged":
            self.weights.swap_in(wait_s=self.fetch_timeout_s)
        if action != "generate":
            return True
        if ask_ahead:
            self.ahead.ask(self._lease_request())
        try:
            request, seconds = self._generate(lease)
        except RequestRefused as error:  # e.g. the lease expired mid-episode (the environment's answers)
            log.warning("lease %s refused while generating: %s", lease.lease_id, error.detail)
            return True
        except CoordinatorUnreachable:  # the worker's own trouble (or the coordinator's), not the lease's
            raise
        except Exception as error:  # noqa: BLE001 -- one lease's failure fails that lease, never the worker
            self._hand_back(lease, error)
            return True
        with self.weights.changed:
            protocol.generated(seconds)
        ended = time.time()
        self.timeline.record("generate", ended - seconds, ended, self.version)
        self.courier.send(request.model_copy(update={"events": self.timeline.drain()}))
        return True

    def _hand_back(self, lease: LeaseResponse, error: Exception) -> None:
        """``lease`` could not be carried out (its engine raised on it: a request's values no engine
        takes, say): hand it back at once with the reason, for another worker or, a request that
        failed on two, for a refusal to its client (:meth:`echo2.coordinator.work.WorkDesk.fail`);
        the worker goes on with its next lease. The weights it holds are untouched: an engine loads
        a version whole or not at all."""
        reason = f"{type(error).__name__}: {error}"[:2000]
        log.exception("lease %s failed; handing it back: %s", lease.lease_id, reason)
        assert lease.lease_id is not None
        try:
            self.client.fail(LeaseFailure(lease_id=lease.lease_id, reason=reason))
        except RequestRefused as refusal:  # expired meanwhile: the coordinator re-issued it already
            log.warning("lease %s could not be handed back: %s", lease.lease_id, refusal.detail)

    def _generate(self, lease: LeaseResponse) -> tuple[SubmitRequest, float]:
        """The lease's submission (its events added after) and the seconds it took."""
        between_turns = self.weights.swap_in if self.weights.protocol.swaps_mid_lease else None
        updates = self.weights if self.spec.swap_between_steps else None
        return self.generation.generate(lease, lambda: self.version, between_turns, post=self.courier.post,
                                        updates=updates)

    def _lease_now(self) -> Answered | None:
        """Get ready as the protocol says (fetch the newest, or swap the staged version in), then
        ask for a lease; None: the fetch failed (the next round retries)."""
        with self.weights.changed:
            before = self.weights.protocol.before_lease()
        if before == "fetch_newest" and not self.weights.try_fetch_newest("the newest weights"):
            return None
        if before == "swap_in":
            self.weights.swap_in()
        return self.ahead.lease(self._lease_request())

    def _lease_request(self) -> LeaseRequest:
        return LeaseRequest(version=self.version, max_groups=self.generation.lease_groups())

    def run(self) -> None:
        """Work until the coordinator says the run is over (or SIGTERM/SIGINT)."""
        self._setup()
        if self.spec.protocol == "async":
            threading.Thread(target=self.weights.background, daemon=True, name="echo2-fetcher").start()
        try:
            with heap.settled():
                self._work()
        finally:
            self._leave()
        log.info("worker %s done at version %d", self.name, self.version)

    def _work(self) -> None:
        """Take leases until the coordinator says the run is over (or the worker is stopped)."""
        while not self.stop.is_set():
            try:
                if self.session_lost.is_set():
                    self._register_anew()
                    self._fetch_first_weights()
                if not self._work_once():
                    return
            except SessionLost as error:
                log.warning("the coordinator forgot this worker (%s); registering again", error.detail)
                self.session_lost.set()

    def _leave(self) -> None:
        self.stop.set()
        self.courier.close()  # the results in hand go out before the worker leaves
        self.ahead.close()
        self._finished.set()
        if not self.coordinator_said_stop:
            self.client.deregister()  # preempted or failed: hand unfinished leases back at once
        self.client.close()
        if self.relay is not None:
            self.relay.stop()
        self.weights.close()


def heartbeat(version: int, timeline: WorkerTimeline, relay: RelayServer | None, suspects: SuspectSources) -> Heartbeat:
    """What a heartbeat tells the coordinator: the version held, the timeline since the last one,
    the relay's measured upload rate and the relays left for their rate since then."""
    return Heartbeat(version=max(version, 0), events=timeline.drain(),
                     upload_bytes_per_s=relay.throttle.measured_rate() if relay is not None else None,
                     slow_sources=[SlowSource(url=url, bytes_per_s=rate) for url, rate in suspects.reports().items()])


def install_signal_handlers(worker: RolloutWorker) -> None:
    """SIGTERM/SIGINT: finish the request in hand, then leave (preemption-friendly)."""

    def _stop(signum, frame):  # noqa: ARG001
        log.info("signal %d: finishing the current request, then leaving", signum)
        worker.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
