"""The one schema of the hardware a run is spread over: worker classes, the learner's machine, and
the provisioning rule that picks among them.

Shared by the run config (``emulation.fleet``, ``activation``), the ``echo2 plan`` inventory
(:mod:`echo2.planning.inventory`) and the ``echo2 simulate`` scenario
(:mod:`echo2.simulation.scenario`). Links are in Mbit/s, ``None`` meaning unlimited
(:mod:`echo2.units`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from echo2.config.base import Section
from echo2.units import link_bytes_per_s


class ActivationRule(Section):
    """The provisioning rule of cost-aware activation (see :mod:`echo2.coordinator.fleet`), shared
    by real runs (``activation`` of a config) and simulated ones (``activation`` of a scenario)."""

    enabled: bool = True
    """Park the workers the provisioning rule does not need (cheapest sufficient set stays active)."""
    headroom: float = Field(1.1, ge=1)
    """Provision this multiple of the throughput the rule asks for."""
    target_utilization: float = Field(1.0, gt=0, le=1)
    """Learner utilization the rule provisions for."""
    reachable_share: float = Field(0.95, gt=0, le=1)
    """When no available set reaches ``target_utilization`` (dissemination-bound, or too few
    workers), aim for this share of the utilization unlimited throughput would give instead of
    running every worker for the last few points (:func:`echo2.planning.capacity.provisioning_need`,
    per dissemination time in ``planning.activation_rule.common_aim``)."""
    switch_margin: float = Field(0.25, ge=0)
    """Weigh the workers active now this share cheaper when choosing the active set, and park some
    of them only when that saves more than this share of their price: a worker's throughput
    estimate moves by about 12-14% between re-plans (the simulated datacenter scenarios), two
    workers' difference by about 20%, and a smaller margin switched workers on noise."""
    replan_every: int = Field(5, ge=1)
    """Re-plan every this many learner steps (and whenever a worker joins, leaves or dies)."""
    remeasure_after_s: float = Field(300.0, gt=0)
    """A worker parked this long is weighed as a new one again: its throughput and dissemination
    time are forgotten and it works on probation where measuring it could change the choice, so
    one slow lease or one stalled fetch does not park it for the rest of the run (wall seconds in
    a real run, simulated ones in a scenario)."""


class LocalWorkerSpec(Section):
    """One local worker's emulated hardware (for heterogeneous fleets on one machine)."""

    price_per_hour: float = Field(0.0, ge=0)
    """Dollars per hour while active (cost-aware activation and cost accounting)."""
    throughput_factor: float = Field(1.0, gt=0, le=1)
    """Stand for a slower device: each decoding step (and so each lease) takes the CPU time it used
    divided by this factor (the worker idles the rest), whatever else shares the core."""
    worker_class: str = ""
    """Class name in the cost accounting (default: the worker's name)."""
    upload_mbps: float | None = Field(None, gt=0)
    """This worker's relay upload cap, Mbit/s (overrides ``emulation.worker_upload_mbps``)."""
    latency_ms: float = Field(0.0, ge=0)
    """Delay added to every response of this worker's relay (WAN round trip)."""


class WorkerClass(Section):
    """A class of rented workers: ``echo2 plan`` reads the first block of fields (count, price,
    throughput, uplink, preemptions); ``echo2 simulate`` also draws per-worker spreads, latencies
    and delays from the rest."""

    name: str
    """Class name (e.g. ``rtx4090-spot``; cost is reported per class)."""
    count: int = Field(1, ge=1)
    """Workers of this class that can be had."""
    price_per_hour: float = Field(0.0, ge=0)
    """Dollars per hour per worker while it runs (booting included)."""
    tokens_per_s: float | None = Field(None, gt=0)
    """Completion tokens/s one worker generates for this recipe (converted with the mean completion
    length, ``response_tokens``); give this or ``rollouts_per_s``."""
    rollouts_per_s: float | None = Field(None, gt=0)
    """Completions/s one worker generates for this run's model and lengths (measure it:
    ``samples_per_s`` of an ``echo2 worker`` in metrics.jsonl)."""
    throughput_cv: float = Field(0.0, ge=0)
    """Coefficient of variation of one lease's generation time (lognormal; simulator only)."""
    single_sequence_tokens_per_s: float | None = Field(None, gt=0)
    """Tokens/s of one sequence decoding alone on this worker: with ``max_sequences``, its rate falls
    as a lease's batch drains (``planning/engine_curve.py``; simulator only). None: the full rate
    to the last token."""
    max_sequences: int | None = Field(None, ge=2)
    """Sequences its engine runs at once, the batch at which ``tokens_per_s`` holds (simulator only)."""
    batching: Literal["continuous", "static"] = "continuous"
    """How its engine batches: ``continuous`` (vLLM: a finished sequence's slot is taken at once) or
    ``static`` (echo2's own engine: a batch decodes until its longest row is done; simulator only)."""
    upload_mbps: float | None = Field(None, gt=0)
    """Median uplink of one worker, Mbit/s (what it relays weights at); None: unlimited."""
    upload_spread: float = Field(0.0, ge=0)
    """Sigma of the lognormal spread of uplinks across the class's workers (simulator only)."""
    download_mbps: float | None = Field(None, gt=0)
    """Downlink of one worker, Mbit/s; None: unlimited (simulator only)."""
    rtt_ms: float = Field(0.0, ge=0)
    """Median round trip to the learner, ms (every request pays it; simulator only)."""
    rtt_spread: float = Field(0.0, ge=0)
    """Sigma of the lognormal spread of round trips across the class's workers (simulator only)."""
    fetch_delay_s: float = Field(0.0, ge=0)
    """Fixed extra seconds per weight fetch (connection set-up, verification, a slow link; simulator only)."""
    load_s: float = Field(0.0, ge=0)
    """Seconds to load a fetched version into the inference engine (between two leases; simulator only)."""
    relay: bool = True
    """False: unreachable (behind NAT), never relays (simulator only)."""
    preemption_per_hour: float = Field(0.0, ge=0)
    """Expected preemptions per running worker-hour (spot capacity)."""
    preemption_notice_s: float = Field(0.0, ge=0)
    """Warning before a preemption: a lease finishing within it is still submitted (echo2 workers
    finish the request in hand on SIGTERM and deregister; simulator only)."""
    recovery_s: float = Field(300.0, ge=0)
    """Seconds for the replacement of a preempted worker to boot, load the model and fetch the
    newest version: throughput lost (and billed) per preemption."""

    @model_validator(mode="after")
    def _one_throughput(self) -> WorkerClass:
        if (self.tokens_per_s is None) == (self.rollouts_per_s is None):
            raise ValueError(f"worker class {self.name!r}: give exactly one of tokens_per_s and rollouts_per_s")
        if self.single_sequence_tokens_per_s is not None and self.max_sequences is None:
            raise ValueError(f"worker class {self.name!r}: single_sequence_tokens_per_s needs max_sequences "
                             f"(the batch its tokens_per_s holds at)")
        return self

    def rollout_rate(self, response_tokens: float | None = None) -> float:
        """Completions/s of one worker (``tokens_per_s`` needs the mean completion length)."""
        if self.rollouts_per_s is not None:
            return self.rollouts_per_s
        if response_tokens is None:
            raise ValueError(f"worker class {self.name!r} states tokens_per_s: its rollouts/s need response_tokens")
        return self.tokens_per_s / response_tokens

    def effective_rollouts_per_s(self, response_tokens: float | None = None) -> float:
        """Throughput discounted by the time lost to preemptions: ``mu * (1 - rate * recovery / 3600)``."""
        return self.rollout_rate(response_tokens) * max(0.0, 1.0 - self.preemption_per_hour * self.recovery_s / 3600)

    @property
    def upload_bytes_per_s(self) -> float:
        """The uplink in bytes/s (infinite when unlimited)."""
        return link_bytes_per_s(self.upload_mbps)


class LearnerHardware(Section):
    """The learner's machine as the capacity model and the simulator see it: how long a step takes
    and how fast it uploads a version (the inventory and the scenario add what they price it by)."""

    train_step_s: float | None = Field(None, gt=0)
    """T_train: seconds per optimizer step including publishing (measure it: ``learner_busy_s /
    steps`` of a run). An inventory requires it; a scenario leaving it None computes it from the
    learner's FLOPs plus ``publish_s``."""
    upload_mbps: float | None = Field(None, gt=0)
    """The learner's uplink, Mbit/s; None: unlimited (loopback)."""

    @property
    def upload_bytes_per_s(self) -> float:
        """The uplink in bytes/s (infinite when unlimited)."""
        return link_bytes_per_s(self.upload_mbps)
