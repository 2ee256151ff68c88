"""The one typed configuration of a run: YAML file + dotted ``key=value`` overrides.

Every field is documented where it is declared (the docstring under it becomes its
description). Unknown or ill-typed keys fail with a one-line :class:`ConfigError` naming the
key. The resolved config is written into every run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from echo2.config.agent import AgentConfig
from echo2.config.asynchrony import Asynchrony
from echo2.config.base import ConfigError, Section, apply_override, builtin_or_path, describe, read_yaml
from echo2.config.evaluation import EvalConfig
from echo2.config.fleet import ActivationRule, LocalWorkerSpec
from echo2.config.learner import LearnerConfig
from echo2.config.moved import move_keys, moved_override
from echo2.config.service import ServiceConfig
from echo2.model.dtype_choice import fastest_dtype
from echo2.model.sources import SHIPPED_MODEL
from echo2.net.redact import redact_config


class RunConfig(Section):
    dir: str = "runs"
    """Parent folder of run directories."""
    name: str | None = None
    """Run directory name under ``dir``; default: a timestamp."""
    seed: int = 0
    """Seed for the prompt stream, sampling and initialisation."""
    steps: int = Field(200, ge=1)
    """Learner steps (optimizer updates) to run; policy version ``v`` = steps done."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop after this much wall time even if ``steps`` are not done (then evaluate and save)."""


class ModelConfig(Section):
    name: str = SHIPPED_MODEL
    """``echo2/tiny-arith`` (the small model shipped with echo2), a named shipped source
    (``smollm2-135m-instruct``), a ``.gguf`` file, a local HF folder or a hub id
    (:mod:`echo2.model.sources`)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    """Compute dtype: the workers' weights and the learner's forward/backward (under autocast when
    it differs from ``learner.master_dtype``). bfloat16 is ~3x faster than float32 on CPUs with
    avx512_bf16 or AMX, and on GPUs, and ~4x slower where it is emulated (AVX2-only CPUs); ``auto``
    picks the faster for the machine that loads the config (:mod:`echo2.model.dtype_choice`) and
    the run states why."""
    _dtype_reason: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _resolve_auto_dtype(self) -> ModelConfig:
        if self.dtype == "auto":
            choice = fastest_dtype()
            self.dtype, self._dtype_reason = choice.dtype, f"model.dtype=auto: {choice.dtype}, as {choice.reason}"
        return self

    @property
    def dtype_reason(self) -> str | None:
        """Why ``auto`` became the dtype it is (None: the dtype was set as it is)."""
        return self._dtype_reason


class TaskConfig(Section):
    name: str = "arithmetic"
    """``arithmetic``, ``jsonl``, or ``module:Class`` naming a subclass of ``echo2.tasks.Task``; or
    ``agent:module:function``, an async agent function played through the gateway (``agent.*``)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the task class (e.g. ``num_operands``, ``path`` for jsonl)."""


class RolloutConfig(Section):
    group_size: int = Field(8, ge=2)
    """Completions sampled per prompt (G); advantages are normalised within a group."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature; the learner scores log-probs at the same temperature."""
    max_new_tokens: int = Field(14, ge=1)
    """Longest completion (an episode: longest reply), EOS included."""
    groups_per_lease: Annotated[int, Field(ge=1)] | Literal["device"] = 16
    """Prompts handed to a worker per lease (one request, one generation batch); ``device``: each
    worker asks for as many as its device's free memory holds the decoding of, up to the whole
    staleness window (``(S + 1) * B``; the coordinator still cuts it to the worker's share of the
    window while others are live), its first lease one group, whose prompts size the next
    (:mod:`echo2.core.lease_sizing`). A GPU decodes 1024 rows about as fast per step as 64."""
    engine: str = "hf"
    """Workers' generation engine: ``hf`` (the model in the worker process, any device; the
    default), ``vllm`` (vLLM on a CUDA GPU, ``pip install 'echo2[vllm]'``), ``llamacpp`` (llama.cpp on
    a GGUF model, ``pip install 'echo2[llamacpp]'``; full-weights runs: a LoRA run is refused), or ``module:Class``
    naming an engine of your own (:class:`echo2.rollout.engines.Engine`: every method the worker
    calls), importable on every worker's machine."""
    swap_between_turns: bool = True
    """Episodes (``docs/environments.md``), async protocol: a worker loads a newer version between
    two turns of an episode (each turn records its version; staleness counts from the first)."""
    swap_between_steps: bool = False
    """Async protocol: a worker applies a newer version between two decoding steps (an in-flight
    update, as PipelineRL, AReaL and prime-rl do), recomputing its running rows' cache under it;
    each token carries the version whose logits it came from and the learner audits each span at
    its own version (:mod:`echo2.model.continuous`). Staleness counts from the lease's version (a
    group's oldest tokens). The hf engine's continuous batch only; others swap between leases."""

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        return builtin_or_path(engine, ("hf", "vllm", "llamacpp"), "rollout.engine", "engine")


class WorkersConfig(Section):
    count: int = Field(2, ge=0)
    """Local worker processes ``echo2 train`` starts (remote ones may join by URL too)."""
    threads: int = Field(1, ge=1)
    """Torch threads per local worker."""
    cpus: list[int] | None = None
    """CPUs the local worker processes may run on, e.g. ``[1]`` (Linux; local launcher only; None:
    the CPUs the learner started with)."""
    device: str = "cpu"
    """Device of the workers' hf engine: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (a Ray actor's
    ``cuda`` is the GPU Ray gave it)."""
    relay: bool = True
    """Local workers serve chunks to peers; False makes them unreachable leaves (as behind NAT)."""


class RayConfig(Section):
    """Rollout workers as Ray actors (``launcher: ray``; ``pip install 'echo2[ray]'``)."""

    address: str | None = None
    """Ray cluster to place workers on (``auto``, ``host:6379``, ``ray://host:10001``); None starts
    a local Ray for the run (token authentication on, with a fresh token kept in the environment)."""
    num_cpus: int | None = Field(None, ge=1)
    """CPUs a local Ray started for the run offers (None: every core)."""
    cpus_per_worker: float = Field(1.0, gt=0)
    """CPUs each worker actor requests (Ray places it where they are free)."""
    gpus_per_worker: float = Field(0.0, ge=0)
    """GPUs each worker actor requests (with ``workers.device=cuda`` the hf engine runs on it)."""
    max_restarts: int = Field(3, ge=0)
    """How often Ray restarts a worker actor that died (it then registers again and carries on)."""


class ActivationConfig(ActivationRule):
    """Cost-aware activation (see :mod:`echo2.coordinator.fleet`) and the learner's price."""
    learner_price_per_hour: float = Field(0.0, ge=0)
    """The learner's (premium) price per hour: its share of the run's cost and the price of the
    centralized counterfactual in the cost accounting."""


class BroadcastConfig(Section):
    """How new weights reach the workers (see :mod:`echo2.broadcast`)."""

    mode: Literal["star", "pipelined"] = "pipelined"
    """``star``: every worker downloads from the learner; ``pipelined``: peers relay chunks down
    chains/trees planned per version, so the learner uploads each version about once."""
    chunk_mib: float = Field(1.0, gt=0, le=256)
    """Chunk size; smaller chunks shorten the pipeline's fill time, larger ones cut request overhead."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Dtype of the weights on the wire; bfloat16 halves the bytes (workers cast back on load)."""
    encoding: Literal["full", "delta"] = "delta"
    """``delta`` (default): each version is also published as a lossless delta against the
    previous one (:mod:`echo2.broadcast.delta`: XOR, byte shuffle, zstd); a worker holding that
    previous version fetches the delta through the same relays and applies it, any other fetches
    the full version. ``bench/delta.py``: after real steps SmolLM2-135M's versions shrink 2.9x
    (fp32) and 29x (bf16) and reach the end of an 8-node capped chain 2x and 6.7x sooner; the
    shipped 1.8 MB model's shrink 1.9x / 8.7x at about the same chain time. ``full``: never
    make deltas (saves the learner the encode: ~1.4-4.4 s per version at 135M params)."""
    fan_out: int = Field(1, ge=1)
    """Children per relaying worker (1 = chains, optimal when uplinks are alike)."""
    learner_fan_out: int = Field(1, ge=1)
    """Workers fetching straight from the learner (the roots of the chains)."""
    stall_s: float = Field(10.0, gt=0)
    """A source that sends nothing for this long is abandoned for the next one in the fallback chain."""
    timeout_s: float = Field(300.0, gt=0)
    """Longest a worker spends fetching one version before reporting failure and retrying."""


class VerificationConfig(Section):
    """Audits of what workers submit (see :mod:`echo2.learner.verification`). Rewards need none: the
    coordinator computes them; an audit recomputes a group's behaviour log-probs under the policy
    of the group's own version. Each worker is audited at its own rate: 1 during probation, then
    decaying with every clean audit down to a floor; a failed audit quarantines it."""

    probation_groups: int = Field(32, ge=0)
    """A new worker's first this many groups are all audited."""
    audit_decay: float = Field(0.9, gt=0, le=1)
    """After probation, each clean audit multiplies the worker's audit rate by this (1 = no decay)."""
    audit_floor: float = Field(0.02, ge=0, le=1)
    """Lowest audit rate a worker's clean record earns it."""
    logprob_tolerance: float = Field(0.2, gt=0)
    """Mean absolute log-prob difference (nats/token) above which a worker is quarantined."""
    check_draws: bool = True
    """Also check that each audited token is the one the lease's draws pick (:mod:`echo2.model.draws`):
    a worker that returns text of its choice, one answer G times or its pick of several tries is
    quarantined like a log-prob liar. ``rollout.engine=vllm`` does not draw by that rule: turn it off there."""
    draw_tolerance: float | None = Field(None, gt=0, lt=0.5)
    """How far (in the cumulative probability the draw is compared on) a token's draw may fall
    outside its interval before the token counts as chosen, not drawn: the arithmetic of a
    worker's distribution (bf16 against float32, a cached decode against a whole forward pass)
    moves the interval's ends by about that much. None: by ``model.dtype`` (0.01 for float32, 0.2
    for bfloat16, measured by ``bench/draws.py``)."""


class CheckpointConfig(Section):
    every: int = Field(50, ge=0)
    """Save a checkpoint every this many steps (0 = only at the end)."""


class CoordinatorConfig(Section):
    host: str = "127.0.0.1"
    """Interface the coordinator listens on (0.0.0.0 to let remote workers join)."""
    port: int = Field(0, ge=0, le=65535)
    """Port; 0 picks a free one."""
    token: str | None = None
    """Run token workers must present; generated when not given. Kept in the owner-only
    ``RUN_DIR/token``; the run's ``config.yaml`` shows ``<redacted>``."""
    tls_certfile: str | None = None
    """Certificate (PEM) the coordinator serves TLS with (with ``tls_keyfile``): its URL is then
    https://, workers verify it with ``--ca-file`` or ``--pin-sha256``, and their relays must serve
    TLS too (``--relay-certfile``/``--relay-keyfile``; local workers reuse this pair)."""
    tls_keyfile: str | None = None
    """Private key (PEM) of ``tls_certfile``."""
    lease_timeout_s: float = Field(60.0, gt=0)
    """A lease not submitted within this time is re-issued to another worker."""
    window_share: float = Field(0.5, gt=0, le=1)
    """The most of the staleness window's ``(S + 1) * B`` group slots one worker may hold while
    other workers are live (and at most three leases' worth: the one it submits, the one it
    generates, the one it asked for ahead; a lease never grants more than
    ``rollout.groups_per_lease``: :mod:`echo2.core.shares`)."""
    lease_wait_s: float = Field(2.0, ge=0)
    """How long a lease request may be held open (long-poll) while it could still be granted: the
    staleness window full, the worker's share of it in hand, its parking not over
    (:mod:`echo2.core.leasing`)."""
    heartbeat_timeout_s: float = Field(30.0, gt=0)
    """A worker silent for this long is declared dead and its leases re-issued."""
    start_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the coordinator and the local workers to come up."""
    scoring_processes: int = Field(2, ge=0)
    """Processes the coordinator scores submissions in: the task rebuilt in each, every verdict
    and environment answer bounded by ``scoring_timeout_s`` (a process that overruns is killed
    and replaced, and that submission refused: :mod:`echo2.coordinator.scoring_processes`).
    0: in the coordinator's HTTP threads, with no bound (a thread cannot be stopped, and
    math-verify's own timeouts work only on a main thread)."""
    scoring_timeout_s: float = Field(10.0, gt=0)
    """The longest one completion's verdict, or one environment answer, may take."""

    @property
    def heartbeat_interval_s(self) -> float:
        """How often a worker beats: four beats per ``heartbeat_timeout_s``, at most 2 s apart."""
        return min(2.0, self.heartbeat_timeout_s / 4)
    data_timeout_s: float = Field(300.0, gt=0)
    """How long the learner waits for one batch before failing with a clear error."""
    @model_validator(mode="after")
    def _tls_pair(self) -> CoordinatorConfig:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("give tls_certfile and tls_keyfile together")
        return self


class EmulationConfig(Section):
    """One machine standing for a fleet of remote workers: caps, delays and emulated hardware for
    the learner's chunk server and the local workers, and the co-located baseline. Remote workers'
    links are real, so none of it applies to them except ``fetch_delay_s``, which every worker is
    told. Kept apart from the sections that set up a real run: nothing here is needed for one."""

    learner_upload_mbps: float | None = Field(None, gt=0)
    """Upload cap of the learner's chunk server in Mbit/s (bandwidth emulation; None = uncapped)."""
    learner_latency_ms: float = Field(0.0, ge=0)
    """Delay added before each of the learner's chunk responses (WAN latency emulation; the
    workers' own: ``emulation.fleet[*].latency_ms``)."""
    worker_upload_mbps: float | None = Field(None, gt=0)
    """Upload cap of each local worker's relay in Mbit/s (bandwidth emulation; None = uncapped)."""
    fetch_delay_s: float = Field(0.0, ge=0)
    """Fixed seconds added after every weight fetch (set-up or verification overhead; not a
    bandwidth limit: a slow link is ``worker_upload_mbps`` and ``learner_upload_mbps``)."""
    fleet: list[LocalWorkerSpec] = Field(default_factory=list)
    """Per local worker (in order, cycled): emulated price and speed; empty = all alike and free."""
    colocated: bool = False
    """The co-located baseline (what verl or TRL do on one node): one local worker on the learner's
    own CPUs (``learner.cpus``, else the CPUs the run started with) and with its threads, under
    ``protocol: sync`` (S = 0), so that generation and training take turns on the same cores;
    weights reach it over loopback, uncapped: the baseline distributed runs of the same recipe are
    compared with."""


class LimitsConfig(Section):
    """How much the coordinator's server takes from one client before it refuses: the tuning of
    the defences against slow and flooding clients (``docs/security.md``). The per-worker budgets
    (requests, heartbeats, timeline events, long-polls, identities on trial) are fixed in the code
    beside the measurements that set them."""

    head_timeout_s: float = Field(10.0, gt=0)
    """Each request head (request line and headers) must arrive within this time, else 408 and
    the connection is closed (what cuts off slow-loris clients)."""
    body_timeout_s: float = Field(60.0, gt=0)
    """Each request body must arrive within this time of its head, else 408 (a submission of a
    few MiB over a slow uplink fits well within it)."""
    registrations_burst: int = Field(32, ge=1)
    """Registrations one client address may make at once (raised to ``workers.count`` when
    that is larger, since local workers all come from one address); past it, 429 with Retry-After."""
    registrations_per_minute: float = Field(60.0, gt=0)
    """How fast an address's registration allowance refills after the burst."""


class TelemetryConfig(Section):
    tensorboard: bool = True
    """Also write TensorBoard event files under ``RUN_DIR/tensorboard``."""
    progress: bool = True
    """Show a live progress line on the console."""
    wandb: bool = False
    """Also log the metrics TensorBoard gets to a Weights & Biases run (``pip install 'echo2[wandb]'``),
    its config the run's ``config.yaml``; files under ``RUN_DIR/wandb``."""
    wandb_project: str = "echo2"
    """W&B project of that run."""
    wandb_mode: Literal["offline", "online"] = "offline"
    """``offline``: nothing leaves the machine (upload later: ``wandb sync RUN_DIR/wandb/offline-run-*``);
    ``online``: stream to W&B as the run goes (needs ``wandb login``)."""
    trackio: bool = False
    """Also log the metrics TensorBoard gets to a local trackio run (``pip install 'echo2[trackio]'``),
    its config the run's ``config.yaml``; stored in ``RUN_DIR/trackio`` unless ``$TRACKIO_DIR`` is set."""
    trackio_project: str = "echo2"
    """trackio project of that run (``trackio show --project NAME`` with ``TRACKIO_DIR=RUN_DIR/trackio``)."""


class Config(Asynchrony):
    """A whole run. ``protocol`` and ``staleness`` are the two knobs of asynchrony."""

    launcher: Literal["local", "ray"] = "local"
    """How ``echo2 train`` starts its ``workers.count`` workers: ``local`` subprocesses, or ``ray``
    actors placed with their resource requests (``ray.*``) and restarted when they fail."""
    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    broadcast: BroadcastConfig = Field(default_factory=BroadcastConfig)
    activation: ActivationConfig = Field(default_factory=ActivationConfig)
    verification: VerificationConfig = Field(default_factory=VerificationConfig)
    coordinator: CoordinatorConfig = Field(default_factory=CoordinatorConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    emulation: EmulationConfig = Field(default_factory=EmulationConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    """``echo2 serve`` only (:mod:`echo2.config.service`)."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """``task.name=agent:module:function`` only (:mod:`echo2.config.agent`)."""

    @property
    def rollouts_per_step(self) -> int:
        """Completions a learner step trains on: B groups of G."""
        return self.learner.groups_per_step * self.rollout.group_size

    @property
    def lease_groups(self) -> int:
        """The most groups one lease grants: ``rollout.groups_per_lease`` (``device``: the staleness window)."""
        if self.rollout.groups_per_lease != "device":
            return self.rollout.groups_per_lease
        assert self.staleness is not None  # resolved by validation
        return (self.staleness + 1) * self.learner.groups_per_step

    @model_validator(mode="after")
    def _colocated(self) -> Config:
        workers = self.workers
        if not self.emulation.colocated:
            return self
        problems = [problem for problem, wrong in (
            ("launcher: local", self.launcher != "local"),
            (f"protocol: sync (S = 0), not {self.protocol} S={self.staleness}", self.staleness != 0),
            ("workers.count: 1", "count" in workers.model_fields_set and workers.count != 1),
            ("no workers.cpus (it takes the learner's)", workers.cpus is not None),
            ("no emulation.worker_upload_mbps", self.emulation.worker_upload_mbps is not None)) if wrong]
        if problems:
            raise ValueError(f"emulation.colocated needs {'; '.join(problems)}")
        if workers.count != 1 or workers.threads != self.learner.threads:  # (assigning re-validates)
            workers.count, workers.threads = 1, self.learner.threads
        return self

    @model_validator(mode="after")
    def _in_flight_updates_need_async(self) -> Config:
        if self.rollout.swap_between_steps and self.protocol != "async":
            raise ValueError(f"rollout.swap_between_steps applies versions that arrive in the background: it needs "
                             f"protocol: async, not {self.protocol}")
        return self

    @model_validator(mode="after")
    def _cpus_for_local_workers(self) -> Config:
        if self.workers.cpus is not None and self.launcher != "local":
            raise ValueError("workers.cpus pins local worker processes; Ray places its actors by ray.cpus_per_worker")
        return self


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load ``path`` (YAML; optional) and apply ``overrides``; raise :class:`ConfigError` on any problem."""
    data = read_yaml(path) if path is not None else {}
    move_keys(data, f"config file {path}")
    for assignment in overrides:
        apply_override(data, moved_override(assignment))
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        key, what = describe(error)
        raise ConfigError(f"config key '{key}': {what}") from None


def shareable_config(config: Config) -> dict[str, Any]:
    """The resolved config as plain data, ``coordinator.token`` redacted: what a run directory
    keeps and what experiment trackers are given."""
    return redact_config(config.model_dump(mode="json"))


def dump_config(config: Config) -> str:
    """The resolved config as YAML (what a run directory keeps), ``coordinator.token`` redacted."""
    return yaml.safe_dump(shareable_config(config), sort_keys=False)
