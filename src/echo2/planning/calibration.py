"""Calibrate once, predict many: what a run needs that nobody can declare, measured on one run.

``echo2 calibrate`` trains one short configuration and keeps, from its ``metrics.jsonl`` and
``timeline.jsonl``, the figures that depend on the model, the machine and the code rather than on
the run's settings:

* ``train_step_s``: the learner's busy time per step (training + publishing), and its spread;
  ``step_seconds`` keeps every step's, because a step trains only the sequences of groups whose
  rewards differ and that share falls as the policy learns: a prediction of an N-step run takes
  the calibration's own first N steps (:meth:`Calibration.step_s`);
* ``rollouts_per_s``: one worker's generation rate at ``throughput_factor`` 1 (each worker's
  ``samples_per_s`` divided by its factor, averaged), and the spread of its lease times;
* ``lease_overhead_s``: what a worker spends between two leases besides generating (submit, the
  coordinator's scoring, the next lease): the lower quartile of the gaps between two of a
  worker's generations (higher gaps hold waits for the window or for weights, which the models
  add themselves);
* ``fetch_s`` and ``dissemination_s``: a weight fetch and the time from a step's end until every
  worker holds the version, each less the transfer the run's bandwidth caps imply (on loopback
  without caps: the whole time): the fixed cost of a version, to which a prediction adds the
  transfer its own caps imply (:meth:`Calibration.fixed_dissemination_s`: how soon a worker
  hears of a version depends on the protocol);
* ``full_bytes`` and ``delta_bytes``: one version on the wire, whole and as a delta;
* ``lengths``: the run's own completion lengths, per trained group (``group_lengths`` of its step
  records), and the cap they stop at (``max_tokens``): a prediction draws each leased group from
  them (:mod:`echo2.planning.lengths`), so a task with long tails is timed with its tails;
* ``decode_fixed_s`` and ``decode_per_sequence_s``: the engine's decoding step as a line in the rows
  it decodes together (:func:`with_decode_curve`): its shape timed on this machine with the workers'
  threads (:mod:`echo2.model.decode_probe`), its level set so that the calibration run's own leases
  (``lease_s``), drawn from its lengths at its workers' share of a core, take what they took — the
  probe decodes a short synthetic prompt, leases prefill real ones and decode at longer contexts.
  A lease of ``n`` rows of which the longest is ``L`` tokens takes ``L x (fixed + n x per_sequence)``
  in echo2's engine (static batches).

Everything else a prediction needs comes from the predicted configuration itself: protocol,
S, batch, fleet size and speeds (``emulation.fleet[i].throughput_factor``), links, prices.
:func:`inventory_for` turns a configuration and a calibration into an ``echo2 plan`` inventory;
:func:`echo2.simulation.calibrate.scenario_for` into an ``echo2 simulate`` scenario.
"""

from __future__ import annotations

import itertools
import os
import platform
import statistics
from collections import defaultdict
from pathlib import Path

from pydantic import Field, ValidationError

from echo2.config import Config, ConfigError, Section, WorkerClass, first_error, load_config, read_yaml
from echo2.planning import engine_curve
from echo2.planning.broadcast_time import broadcast_seconds
from echo2.planning.engine_curve import DecodeCurve
from echo2.planning.inventory import Inventory, LearnerSpec
from echo2.planning.lengths import LengthSampler, ResponseLengths
from echo2.telemetry.metrics import read_intervals, read_jsonl
from echo2.units import MIB, link_bytes_per_s

#: Learner steps left out at the start of a calibration run (first loads, first versions).
WARMUP_STEPS = 3

#: Trained groups whose lengths a calibration keeps (the newest): enough to draw tails from, few
#: enough for a readable file.
LENGTH_GROUPS = 512

#: Requests in one lease cycle of a worker: submit and lease, plus the version check before every
#: lease in ``sync`` and ``pull``.
REQUESTS_PER_LEASE = {"async": 2, "sync": 3, "pull": 3}


class Calibration(Section):
    """The measured figures of one calibration run (``echo2 calibrate``; see the module docstring)."""

    source: str
    """The run directory measured."""
    model: str
    """``model.name`` of the run: a calibration holds for this model only."""
    model_sha256: str
    """Short hash of the model's weights (:func:`echo2.model.sources.model_fingerprint`)."""
    machine: str
    """Where it ran (architecture, cores)."""
    protocol: str
    """The calibration run's protocol (how its workers heard of new versions)."""
    train_step_s: float = Field(gt=0)
    """Learner seconds per optimizer step, publishing included (mean after warm-up)."""
    step_seconds: list[float] = []
    """Learner seconds of each step after warm-up, in order (empty: only the mean is known)."""
    train_step_cv: float = Field(ge=0)
    """Coefficient of variation of the learner's step time."""
    rollouts_per_s: float = Field(gt=0)
    """Completions/s of one worker at throughput_factor 1 while it generates."""
    throughput_cv: float = Field(ge=0)
    """Coefficient of variation of one lease's generation time."""
    lease_s: float | None = Field(None, gt=0)
    """Mean seconds a worker spent generating one lease (None: an older calibration)."""
    lease_overhead_s: float = Field(ge=0)
    """Seconds between two leases of a worker besides generating (submit, scoring, next lease)."""
    fetch_s: float = Field(ge=0)
    """Fixed seconds of one weight fetch beyond its transfer."""
    dissemination_s: float = Field(ge=0)
    """Fixed seconds from a step's end until every worker holds the version, beyond the transfer."""
    full_bytes: float = Field(gt=0)
    """Bytes of one whole version on the wire."""
    delta_bytes: float | None = Field(None, gt=0)
    """Mean bytes of one delta version (None: the run shipped whole versions)."""
    lengths: list[list[float]] = []
    """Completion lengths of the run's trained groups after warm-up (the last :data:`LENGTH_GROUPS`),
    tokens; empty: the run recorded none."""
    max_tokens: float | None = Field(None, gt=0)
    """``rollout.max_new_tokens`` of the run: the cap its lengths stop at."""
    decode_fixed_s: float | None = Field(None, ge=0)
    """Seconds of one decoding step of the engine whatever the batch (None: not measured)."""
    decode_per_sequence_s: float | None = Field(None, gt=0)
    """Seconds each row adds to a decoding step (None: not measured)."""

    def decode_curve(self) -> DecodeCurve | None:
        """The engine's decoding speed against the rows in flight, static batches (None: not measured)."""
        if self.decode_fixed_s is None or self.decode_per_sequence_s is None:
            return None
        return DecodeCurve(self.decode_fixed_s, self.decode_per_sequence_s, continuous=False)

    def response_lengths(self) -> ResponseLengths | None:
        """The measured lengths as a scenario's distribution (None: none recorded)."""
        if not self.lengths:
            return None
        capped = self.max_tokens is not None and max(map(max, self.lengths)) <= self.max_tokens
        return ResponseLengths(source=f"measured: {self.source}", groups=self.lengths,
                               max_tokens=self.max_tokens if capped else None)  # episodes of several turns exceed it

    def step_s(self, steps: int) -> float:
        """Learner seconds per step over a run of ``steps`` steps: the mean of the calibration's own
        steps up to that point, since the groups a step skips (all rewards equal, no gradient) grow
        as the policy learns; all of its steps when the calibration is shorter."""
        window = self.step_seconds[: max(1, steps - WARMUP_STEPS)]
        return statistics.fmean(window) if window else self.train_step_s

    def fixed_dissemination_s(self, config: Config) -> float:
        """Fixed seconds from a step's end until a worker generates with the new version, under
        ``config``'s protocol. ``sync`` and ``pull`` workers ask for the version before every lease,
        so they find a new one within a request (half a lease overhead) and fetch it; ``async``
        workers hear of it at their next lease or heartbeat: what an async calibration measured,
        else half a heartbeat interval on top of the fetch."""
        if config.protocol != "async":
            return self.fetch_s + self.request_s()
        if self.protocol == "async":
            return self.dissemination_s
        return self.fetch_s + config.coordinator.heartbeat_interval_s / 2

    def request_s(self) -> float:
        """One request's share of the lease overhead (round trip and the coordinator's work)."""
        return self.lease_overhead_s / REQUESTS_PER_LEASE[self.protocol]

    def version_bytes(self, config: Config) -> float:
        """What one version costs on the wire under ``config``'s encoding (a delta when measured)."""
        if config.broadcast.encoding == "delta" and self.delta_bytes is not None:
            return self.delta_bytes
        return self.full_bytes


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def calibrate_run(run_dir: Path) -> Calibration:
    """Measure :class:`Calibration` from a finished run directory (``echo2 train`` output)."""
    from echo2.model.sources import model_fingerprint

    config = load_config(str(run_dir / "config.yaml"))
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner_busy_s" in r]
    if len(steps) <= WARMUP_STEPS + 2:
        raise ConfigError(f"{run_dir}: {len(steps)} learner steps; a calibration needs more than {WARMUP_STEPS + 2}")
    timeline = read_intervals(run_dir / "timeline.jsonl")
    train = [i["end"] - i["start"] for i in timeline if i["who"] == "learner"][WARMUP_STEPS:]
    by_worker: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for interval in timeline:
        if interval["who"] not in ("learner", "broadcast"):
            by_worker[interval["who"]][interval["kind"]].append(interval)
    factors = worker_factors(config)
    last, rates, gaps, fetches, leases = steps[-1], [], [], [], []
    for name, kinds in by_worker.items():
        rate = last.get(f"worker/{name}/samples_per_s")
        if rate:
            rates.append(rate / factors.get(name, 1.0))
        generate = sorted(kinds["generate"], key=lambda i: i["start"])
        leases += [i["end"] - i["start"] for i in generate]
        gaps += [b["start"] - a["end"] for a, b in itertools.pairwise(generate)]
        fetches += [i["end"] - i["start"] for i in kinds["fetch"]]
    if not rates or len(gaps) < 4 or not fetches:
        raise ConfigError(f"{run_dir}: too few worker leases or fetches to calibrate from")
    full = full_version_bytes(config)
    deltas = [r["delta_bytes"] for r in steps if "delta_bytes" in r]
    delta = statistics.fmean(deltas) if deltas else None
    shipped = delta if config.broadcast.encoding == "delta" and delta else full
    workers = len(by_worker)
    spans = [r["dissemination_max_s"] for r in steps[WARMUP_STEPS:] if "dissemination_max_s" in r]
    lengths = [group for r in steps[WARMUP_STEPS:] for group in r.get("group_lengths", [])][-LENGTH_GROUPS:]
    return Calibration(
        source=str(run_dir), model=config.model.name, model_sha256=model_fingerprint(config.model.name),
        machine=f"{platform.machine()}, {os.cpu_count()} cores", protocol=config.protocol,
        train_step_s=statistics.fmean(train), train_step_cv=_cv(train), step_seconds=train,
        rollouts_per_s=statistics.fmean(rates), throughput_cv=_cv(leases), lease_s=statistics.fmean(leases),
        lease_overhead_s=statistics.quantiles(gaps, n=4)[0],
        fetch_s=max(0.0, statistics.median(fetches) - own_transfer_s(config, shipped, workers)),
        dissemination_s=max(0.0, statistics.median(spans or [0.0]) - dissemination_transfer_s(config, shipped, workers)),
        full_bytes=full, delta_bytes=delta, lengths=lengths, max_tokens=config.rollout.max_new_tokens,
    )


def with_decode_curve(calibration: Calibration, config: Config) -> Calibration:
    """``calibration`` with the engine's decode curve timed on this machine, with ``config``'s
    model, dtype and worker threads (loads the model: :mod:`echo2.model.decode_probe`)."""
    from echo2.model.decode_probe import decode_steps

    curve = DecodeCurve.fitted(decode_steps(config.model.name, config.model.dtype, config.workers.threads),
                               continuous=False)
    level = 1.0
    if calibration.lease_s is not None and (lengths := calibration.response_lengths()) is not None:
        sampler, groups = LengthSampler(lengths, lengths.measured_mean), config.lease_groups
        speed = core_share(config) * statistics.fmean(worker_factors(config).values() or [1.0])
        rows_per_s = engine_curve.lease_rollouts_per_s(curve, lambda rng: sampler.group(rng, config.rollout.group_size), groups)
        level = calibration.lease_s / (groups * config.rollout.group_size / (rows_per_s * speed))
    return calibration.model_copy(update={"decode_fixed_s": level * curve.fixed_s,
                                          "decode_per_sequence_s": level * curve.per_sequence_s})


def core_share(config: Config) -> float:
    """The share of a core each local worker's thread gets while it generates: the co-located worker
    takes turns with the learner on the learner's CPUs (all of it); the others share
    ``workers.cpus`` (else every CPU), each busy ``throughput_factor`` of the time."""
    if config.emulation.colocated:
        return 1.0
    specs, workers = config.emulation.fleet, config.workers
    busy = sum(workers.threads * (specs[i % len(specs)].throughput_factor if specs else 1.0)
               for i in range(workers.count))
    cpus = len(workers.cpus) if workers.cpus else os.cpu_count() or 1
    return min(1.0, cpus / busy) if busy else 1.0


def worker_factors(config: Config) -> dict[str, float]:
    """``throughput_factor`` of each local worker by name (``local-<i>``, fleet entries cycled)."""
    fleet = config.emulation.fleet
    return {f"local-{i}": fleet[i % len(fleet)].throughput_factor if fleet else 1.0 for i in range(config.workers.count)}


def full_version_bytes(config: Config) -> float:
    """Bytes of one whole version: the model's float32 safetensors, halved for a bfloat16 broadcast."""
    from echo2.model.sources import resolve_model_path  # torch-free

    weights = sum(p.stat().st_size for p in Path(resolve_model_path(config.model.name)).glob("*.safetensors"))
    return weights / 2 if config.broadcast.dtype == "bfloat16" else weights


def _uploads(config: Config) -> list[float]:
    """Each local worker's relay uplink, bytes/s (``inf``: uncapped)."""
    fleet, default = config.emulation.fleet, config.emulation.worker_upload_mbps
    return [link_bytes_per_s(fleet[i % len(fleet)].upload_mbps if fleet and fleet[i % len(fleet)].upload_mbps
                             is not None else default) for i in range(config.workers.count)]


def dissemination_transfer_s(config: Config, version_bytes: float, workers: int) -> float:
    """Seconds the caps alone imply until the last of ``workers`` holds a version (0 uncapped)."""
    uploads = (_uploads(config) + [link_bytes_per_s(config.emulation.worker_upload_mbps)] * workers)[:workers]
    learner = link_bytes_per_s(config.emulation.learner_upload_mbps)
    return broadcast_seconds(version_bytes, learner, uploads, config.broadcast.mode, config.broadcast.chunk_mib * MIB)


def own_transfer_s(config: Config, version_bytes: float, workers: int) -> float:
    """The transfer part of one worker's fetch: its share of the learner's uplink in a star, else the
    slowest uplink on a chain (0 uncapped)."""
    learner = link_bytes_per_s(config.emulation.learner_upload_mbps)
    if config.broadcast.mode == "star":
        return version_bytes * workers / learner
    return version_bytes / min([learner, *_uploads(config)[: max(0, workers - 1)]])


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file (YAML or JSON); errors name the file and the key."""
    try:
        return Calibration.model_validate(read_yaml(path, "calibration"))
    except ValidationError as error:
        raise ConfigError(f"{path}: {first_error(error)}") from None


def lease_rollouts_per_s(config: Config, calibration: Calibration, throughput_factor: float) -> float:
    """Completions/s one worker of speed ``throughput_factor`` delivers under ``config``: a lease of
    ``groups_per_lease x group_size`` completions every generation time plus its lease cycle's requests."""
    lease = config.lease_groups * config.rollout.group_size
    overhead = calibration.request_s() * REQUESTS_PER_LEASE[config.protocol]
    return lease / (lease / (calibration.rollouts_per_s * throughput_factor) + overhead)


def inventory_for(config: Config, calibration: Calibration) -> Inventory:
    """``config``'s learner and local fleet as an ``echo2 plan`` inventory, priced and sized by the
    config, timed by the calibration (one worker class per ``emulation.fleet`` entry)."""
    if calibration.model != config.model.name:
        raise ConfigError(f"the calibration measured model {calibration.model!r}, the config runs "
                          f"{config.model.name!r}: calibrate this model first (echo2 calibrate)")
    fleet = config.emulation.fleet or [None]
    counts = [len(range(i, config.workers.count, len(fleet))) for i in range(len(fleet))]
    workers = []
    for index, (spec, count) in enumerate(zip(fleet, counts, strict=True)):
        if count == 0:
            continue
        factor = spec.throughput_factor if spec else 1.0
        upload = spec.upload_mbps if spec and spec.upload_mbps is not None else config.emulation.worker_upload_mbps
        workers.append(WorkerClass(
            name=(spec.worker_class if spec and spec.worker_class else f"fleet[{index}]"), count=count,
            price_per_hour=spec.price_per_hour if spec else 0.0,
            rollouts_per_s=lease_rollouts_per_s(config, calibration, factor), upload_mbps=upload))
    try:
        return Inventory(learner=LearnerSpec(
            train_step_s=calibration.step_s(config.run.steps), price_per_hour=config.activation.learner_price_per_hour,
            payload_mib=calibration.version_bytes(config) / MIB, upload_mbps=config.emulation.learner_upload_mbps,
            fixed_broadcast_s=calibration.fixed_dissemination_s(config)), workers=workers)
    except ValidationError as error:
        raise ConfigError(f"inventory from the config and calibration: {first_error(error)}") from None
