"""The simulated workers, one record per worker slot drawn from the scenario's classes, and
their fetches (:class:`Fetch`, timed by :mod:`echo2.simulation.fetching`).

A :class:`SimWorker` carries what cost-aware activation reads of a worker (``alive``, ``active``,
``throughput``, ``price_per_hour``: the coordinator's rule, :mod:`echo2.planning.activation_rule`,
decides on a view of it), plus the worker's own state: the version it generates with, the one
staged by its background fetch, what it is doing now.

Per-worker uplinks and round trips are drawn once from lognormal distributions around the class
median (``upload_spread``, ``rtt_spread``); lease times jitter per lease (``throughput_cv``).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from echo2.config.fleet import WorkerClass
from echo2.core.books import Lease
from echo2.core.fetch_chain import SourceChain
from echo2.core.profiling import LeaseCycle
from echo2.core.worker_protocol import WorkerProtocol
from echo2.planning.engine_curve import DecodeCurve, worker_curve
from echo2.simulation.dissemination import Flow, Peer, RelayUplink
from echo2.simulation.scenario import Scenario
from echo2.units import link_bytes_per_s


def lognormal(rng: random.Random, mean: float, cv: float) -> float:
    """A draw with the given mean and coefficient of variation (``mean`` itself when cv = 0)."""
    if cv <= 0:
        return mean
    sigma2 = math.log(1 + cv * cv)
    return mean * math.exp(rng.gauss(-sigma2 / 2, math.sqrt(sigma2)))


@dataclass(eq=False)
class SimWorker:
    worker_id: str
    name: str
    worker_class: str
    spec: WorkerClass = field(repr=False)
    price_per_hour: float
    curve: DecodeCurve = field(repr=False)
    """Its engine's decoding speed as a lease's batch drains."""
    upload: float
    download: float
    rtt_s: float
    heartbeat_phase: float
    declared_throughput: float
    """Rollouts/s discounted for preemptions, as an ``echo2 plan`` inventory declares it."""
    peer: Peer = field(repr=False)
    """What the relay planner knows of this worker."""
    # what the activation rule sees and decides
    alive: bool = False
    active: bool = False
    throughput: float | None = None
    parked_at: float | None = None
    """Simulated time activation parked it (None: active, or not parked yet)."""
    # the worker's own state
    running: bool = False
    """Booted and registered: in the relay plan, preemptible."""
    epoch: int = 0
    """Bumped when the worker goes down: events scheduled for an older epoch are void."""
    unfulfilled: int = 0
    """Its leases that expired unsubmitted since its last submission (:mod:`echo2.core.shares`)."""
    proven: bool = False
    """It has submitted a lease: out of its trial of one group per lease (:mod:`echo2.core.shares`)."""
    groups_delivered: int = 0
    """Its groups trained (:func:`echo2.core.shares.delivered`)."""
    parked_until: float = 0.0
    """Simulated time before which the coordinator grants it nothing (its leases kept expiring)."""
    protocol: WorkerProtocol = field(default_factory=lambda: WorkerProtocol("sync"), repr=False)
    """Its weights-and-leases state and decisions, the live worker's own (:mod:`echo2.core.worker_protocol`)."""
    # the worker's chunk store and relay (:mod:`echo2.simulation.fetching`)
    held: deque[int] = field(default_factory=deque)
    """Versions whole in its store, oldest first."""
    receiving: int = -1
    """The version arriving (-1: none)."""
    inbound: Fetch | None = None
    uplink: RelayUplink | None = field(default=None, repr=False)
    serving: list[Fetch] = field(default_factory=list, repr=False)
    """Fetches its uplink is sending to."""
    waiters: list[Fetch] = field(default_factory=list, repr=False)
    """Fetches long-polling it for a version it has nothing of yet."""
    phase: str = "off"
    """off | request | wait_window | wait_stage | fetch | generate | parked | down."""
    leases: list[SimLease] = field(default_factory=list)
    """Its leases granted and not yet submitted, in the order it generates them (the one in hand,
    then the one it asked for ahead: :mod:`echo2.rollout.lease_ahead`)."""
    busy_until: float = 0.0
    """When the last of its leases is generated."""
    cycle: LeaseCycle = field(default_factory=LeaseCycle)
    """Where its current lease cycle began (``core.profiling.busy_seconds``)."""
    leaving: bool = False
    quarantined: bool = False
    """Never: the simulator fabricates nothing (the books ask every worker)."""

    @property
    def at_work(self) -> bool:
        """Running and active: it takes leases and the census counts it (the coordinator's
        :attr:`echo2.coordinator.records.WorkerRecord.at_work`)."""
        return self.running and self.active

    @property
    def newest(self) -> int:
        """The newest version in its store, arriving or whole (-1: none)."""
        return max(self.receiving, self.held[-1] if self.held else -1)


@dataclass(eq=False)
class SimLease(Lease[None]):
    """A lease of the books (:class:`echo2.core.books.Lease`) as a simulated worker generates it:
    from ``starts_at``, its results in at ``ends_at``."""

    starts_at: float = 0.0
    ends_at: float = 0.0


SimGroup = tuple[int, SimWorker]
"""A submitted group, as the simulated books keep it: its version and its worker."""


def build_fleet(scenario: Scenario, rng: random.Random) -> list[SimWorker]:
    workers = []
    response_tokens = scenario.workload.response_tokens
    interval = scenario.recipe.coordinator.heartbeat_interval_s
    inventory = scenario.inventory()
    for spec, planned in zip(scenario.fleet, inventory.workers, strict=True):
        declared, curve = inventory.throughput(planned), worker_curve(spec, response_tokens)
        for index in range(spec.count):
            upload = spec.upload_bytes_per_s * (math.exp(rng.gauss(0, spec.upload_spread)) if spec.upload_spread else 1)
            rtt = spec.rtt_ms / 1000 * (math.exp(rng.gauss(0, spec.rtt_spread)) if spec.rtt_spread else 1)
            name = f"{spec.name}#{index}"
            workers.append(SimWorker(
                worker_id=name, name=name, worker_class=spec.name, spec=spec, price_per_hour=spec.price_per_hour,
                curve=curve, upload=upload, download=link_bytes_per_s(spec.download_mbps), rtt_s=rtt,
                heartbeat_phase=rng.uniform(0, interval), declared_throughput=declared,
                peer=Peer(name, upload, link_bytes_per_s(spec.download_mbps), rtt / 2, spec.relay)))
    return workers


@dataclass(eq=False)
class Fetch:
    """One worker's fetch of one version."""

    worker: SimWorker
    epoch: int
    version: int
    chain: SourceChain
    """Its sources, the one asked now, when to leave one (the downloader's rules)."""
    begin: float
    left: float
    """Bytes still to get."""
    relay: SimWorker | None = None
    """The relay it receives from or waits on (None: the learner, or between sources)."""
    flow: Flow | None = None
    upstream: Fetch | None = None
    """The relay's own fetch of the version, when it was still arriving there as this one began."""
    ended_at: float | None = None
    """When its last byte arrived (None: not yet)."""
    patience: int = 0
    """Bumped when a wait on a relay ends: its pending give-up event is then void."""
    followers: list[Fetch] = field(default_factory=list)

    def live(self) -> bool:
        return self.epoch == self.worker.epoch
