"""A simulated run's state: the run's books — the same object the coordinator keeps
(:class:`echo2.core.books.Books`), here in simulated seconds — and what only a simulation has:
the event queue, the fleet's draws, the uplinks, the relay plan's cache, billing, activation's
policy, the recorder and the learner's timings.

The simulation is composed, not layered: an event clock (this state's queue) drives separate
objects over it, each handed the ones it calls — the fetches along the relay plan
(:class:`echo2.simulation.fetching.Fetches`), the workers' lease loop
(:class:`echo2.simulation.workers.WorkerLoop`, which fetches through them), and the learner and
the coordinator (:class:`echo2.simulation.engine.Simulation`, whose public moves the lease loop
asks for). Every decision is a core's, the one the live roles call (``echo2.core``).
"""

from __future__ import annotations

import bisect
import random
from collections import deque

from echo2.core.books import Books
from echo2.core.fetch_chain import default_patience_s
from echo2.core.shares import SharePolicy
from echo2.core.worker_protocol import WorkerProtocol
from echo2.planning.activation_rule import ActivationPolicy
from echo2.planning.billing import Billing
from echo2.simulation.centralized import simulate_centralized
from echo2.simulation.dissemination import LearnerUplink, RelayUplink
from echo2.simulation.events import EventQueue
from echo2.simulation.fleet import SimGroup, SimWorker, build_fleet
from echo2.simulation.recorder import Recorder
from echo2.simulation.scenario import Scenario
from echo2.units import MIB
from echo2.units import link_bytes_per_s as mbps


class SimState:
    def __init__(self, scenario: Scenario, timeline_workers: int = 12) -> None:
        self.scenario = scenario
        recipe = scenario.recipe
        self.rng = random.Random(scenario.seed)
        self.queue = EventQueue()
        self.workers: list[SimWorker] = build_fleet(scenario, self.rng)
        for worker in self.workers:
            worker.protocol = WorkerProtocol(recipe.protocol)
        self.workers_by_id = {w.worker_id: w for w in self.workers}
        self.train_s = scenario.train_step_s()
        self.lengths = scenario.workload.sampler()
        """Each leased group's response lengths (:mod:`echo2.planning.lengths`), drawn from their own
        stream so that a scenario without a distribution draws exactly what it drew before."""
        self.lengths_rng = random.Random(f"{scenario.seed}:lengths")
        shares = SharePolicy(groups_per_lease=recipe.lease_groups, window_share=recipe.coordinator.window_share,
                             grows_with_delivery=recipe.rollout.groups_per_lease == "device")
        self.books: Books[SimWorker, SimGroup] = Books(
            self.workers_by_id, lambda group: [group[1].worker_id], staleness=recipe.staleness,
            groups_per_step=recipe.learner.groups_per_step, group_size=recipe.rollout.group_size, shares=shares,
            lease_timeout_s=recipe.coordinator.lease_timeout_s, replan_every=scenario.activation.replan_every,
            train_s=self.train_s)
        """The run's books: a group is its version and its worker, a slot carries nothing."""
        self.protocol = recipe.protocol
        self.groups_per_lease = recipe.lease_groups
        """What a worker asks for in a lease request (the live worker's ``max_groups``)."""
        self.payload = scenario.model.payload_bytes
        self.learner_upload = mbps(scenario.learner.upload_mbps)
        self.chunk = min(scenario.broadcast.chunk_mib * MIB, self.payload)
        self.learner_uplink = LearnerUplink(self.queue, self.learner_upload, self.payload, self.chunk)
        self.patience_s = default_patience_s(scenario.broadcast.stall_s)
        for worker in self.workers:
            worker.uplink = RelayUplink(self.queue, worker.upload)
        self.waiting: deque[tuple[SimWorker, int, int]] = deque()
        self.running: dict[str, SimWorker] = {}
        self.parked: dict[str, tuple[SimWorker, int, int]] = {}
        """Held lease requests of parked workers: id -> (worker, epoch, version)."""
        self.membership = 0
        self.plan_cache: tuple[int, dict[str, list[str]]] | None = None
        """(membership, each running worker's sources) of the relay plan last made."""
        self.published_times: list[float] = [0.0]
        """When each version was published (index = version)."""
        self.billing = Billing(scenario.learner_price_per_hour)
        self.activation = ActivationPolicy.from_rule(scenario.activation, recipe.rollouts_per_step,
                                                     recipe.staleness)
        self.centralized = simulate_centralized(scenario)
        self.recorder = Recorder(scenario, {w.worker_id for w in self.workers[:timeline_workers]}, self.centralized)
        self.step = 0
        self.learner_busy = False
        self.wait_since = 0.0
        self.busy_s = self.idle_s = self.startup_s = 0.0
        self.replanned_at = -1
        self.replan_pending = False

    def version_at(self, server_time: float) -> int:
        """The newest version published at or before ``server_time``."""
        return max(0, bisect.bisect_right(self.published_times, server_time) - 1)
