"""The one typed configuration of a run: YAML file + dotted ``key=value`` overrides.

Every field is documented where it is declared (the docstring under it becomes its
description). Unknown or ill-typed keys fail with a one-line :class:`ConfigError` naming the
key. The resolved config is written into every run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from echo2.model_sources import SHIPPED_MODEL
from echo2.staleness import resolve as resolve_staleness


class ConfigError(ValueError):
    """A config problem, stated in one line that names the offending key."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


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
    (:mod:`echo2.model_sources`)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Compute dtype: the workers' weights and the learner's forward/backward (under autocast when
    it differs from ``learner.master_dtype``). bfloat16 is ~3x faster than float32 on CPUs with
    avx512_bf16 or AMX, and on GPUs."""


class TaskConfig(Section):
    name: str = "arithmetic"
    """``arithmetic``, ``jsonl``, or ``module:Class`` naming a subclass of ``echo2.tasks.Task``."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the task class (e.g. ``num_operands``, ``path`` for jsonl)."""


class RolloutConfig(Section):
    group_size: int = Field(8, ge=2)
    """Completions sampled per prompt (G); advantages are normalised within a group."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature; the learner scores log-probs at the same temperature."""
    max_new_tokens: int = Field(14, ge=1)
    """Longest completion, EOS included."""
    groups_per_lease: int = Field(16, ge=1)
    """Prompts handed to a worker per lease (one request, one generation batch)."""
    engine: Literal["hf", "vllm"] = "hf"
    """Workers' generation engine: ``hf`` (the model in the worker process, any device; the
    default) or ``vllm`` (vLLM on a CUDA GPU, ``pip install 'echo2[vllm]'``)."""


class LocalWorkerSpec(Section):
    """One local worker's emulated hardware (for heterogeneous fleets on one machine)."""

    price_per_hour: float = Field(0.0, ge=0)
    """Dollars per hour while active (cost-aware activation and cost accounting)."""
    throughput_factor: float = Field(1.0, gt=0, le=1)
    """Run at this fraction of the machine's speed (the worker idles the rest), standing for a slower device."""
    worker_class: str = ""
    """Class name in the cost accounting (default: the worker's name)."""
    upload_mbps: float | None = Field(None, gt=0)
    """This worker's relay upload cap, Mbit/s (overrides ``workers.upload_mbps``)."""
    latency_ms: float = Field(0.0, ge=0)
    """Delay added to every response of this worker's relay (WAN round trip)."""
    falsify_rewards: bool = False
    """A dishonest worker reporting reward 1 for everything (exercises verification and quarantine)."""


class WorkersConfig(Section):
    count: int = Field(2, ge=0)
    """Local worker processes ``echo2 train`` starts (remote ones may join by URL too)."""
    threads: int = Field(1, ge=1)
    """Torch threads per local worker."""
    device: str = "cpu"
    """Device of the workers' hf engine: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (a Ray actor's
    ``cuda`` is the GPU Ray gave it)."""
    fetch_delay_s: float = Field(0.0, ge=0)
    """Extra delay added to every weight fetch, standing for a slow link."""
    upload_mbps: float | None = Field(None, gt=0)
    """Upload cap of each local worker's relay in Mbit/s (bandwidth emulation; None = uncapped)."""
    relay: bool = True
    """Local workers serve chunks to peers; False makes them unreachable leaves (as behind NAT)."""
    fleet: list[LocalWorkerSpec] = Field(default_factory=list)
    """Per local worker (in order, cycled): emulated price and speed; empty = all alike and free."""


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
    running every worker (:func:`echo2.planning.capacity.provisioning_need`)."""
    replan_every: int = Field(5, ge=1)
    """Re-plan every this many learner steps (and whenever a worker joins, leaves or dies)."""


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
    fan_out: int = Field(1, ge=1)
    """Children per relaying worker (1 = chains, optimal when uplinks are alike)."""
    learner_fan_out: int = Field(1, ge=1)
    """Workers fetching straight from the learner (the roots of the chains)."""
    learner_upload_mbps: float | None = Field(None, gt=0)
    """Upload cap of the learner's chunk server in Mbit/s (bandwidth emulation; None = uncapped)."""
    stall_s: float = Field(10.0, gt=0)
    """A source that sends nothing for this long is abandoned for the next one in the fallback chain."""
    timeout_s: float = Field(300.0, gt=0)
    """Longest a worker spends fetching one version before reporting failure and retrying."""


#: Published hyper-parameters of each objective (docs/objectives.md), used for the learner fields
#: a config leaves unset: PPO clip ranges, std normalisation of advantages, DAPO's dynamic
#: sampling, and DAPO's overlong buffer as a share of ``rollout.max_new_tokens`` (4096 of 20480).
OBJECTIVE_DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {"clip_low": 0.2, "clip_high": 0.2, "std_normalize": True, "dynamic_sampling": False,
             "overlong_share": 0.0},
    "dr_grpo": {"clip_low": 0.2, "clip_high": 0.2, "std_normalize": False, "dynamic_sampling": False,
                "overlong_share": 0.0},
    "dapo": {"clip_low": 0.2, "clip_high": 0.28, "std_normalize": True, "dynamic_sampling": True,
             "overlong_share": 0.2},
    "gspo": {"clip_low": 3e-4, "clip_high": 4e-4, "std_normalize": True, "dynamic_sampling": False,
             "overlong_share": 0.0},
}


class EchoClipConfig(Section):
    """EchoClip (EchoRL, arXiv 2605.31228): the prefix of a verified-success rollout that ends with
    its highest-entropy step gets an auxiliary loss (see docs/objectives.md)."""

    enabled: bool = False
    """Add the EchoClip auxiliary loss to the objective."""
    weight: float = Field(0.001, ge=0)
    """Coefficient of the auxiliary loss (the authors' public script uses 0.001)."""
    objective: Literal["nll", "clipped"] = "nll"
    """``nll``: negative log-likelihood of the clip's tokens (the paper's auxiliary SFT loss);
    ``clipped``: PPO's clipped surrogate with advantage 1 on those tokens, so a token stops
    being pushed once its probability rose ``clip`` above the sampler's."""
    clip: float = Field(0.2, gt=0)
    """Clip range of the ``clipped`` objective."""
    scope: Literal["degenerate", "success"] = "degenerate"
    """``degenerate``: only the rollouts of groups in which every rollout succeeded (the
    advantage-degenerated groups); ``success``: every verified-success rollout."""
    step_delimiters: list[str] = Field(default_factory=lambda: ["\n", "="])
    """A step ends with a token whose text contains one of these: newlines as in the paper, and
    ``=`` for the arithmetic task's worked steps. Empty: every token is a step."""
    step_entropy: Literal["mean", "max", "sum"] = "mean"
    """How the token entropies of a step make the step's entropy."""


class LoraConfig(Section):
    """Train a LoRA adapter (peft) instead of the full weights; versions then carry only the
    adapter (see :mod:`echo2.lora`). Needs ``pip install 'echo2[lora]'``."""

    enabled: bool = False
    """Freeze the base model and train a low-rank adapter on ``target_modules``."""
    r: int = Field(8, ge=1)
    """Adapter rank: the adapter of a d_out x d_in weight has r * (d_in + d_out) parameters."""
    alpha: float = Field(16.0, gt=0)
    """Scale: the adapter adds (alpha / r) * B A to each target weight."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training (workers sample in eval mode: none)."""
    lr: float | None = Field(None, gt=0)
    """The adapter's learning rate (None: ``learner.lr``). Adapters want rates ~10x those of full
    fine-tuning, so a recipe can set both and switch with ``learner.lora.enabled`` alone."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1)
    """Names of the linear layers that get an adapter (default: every projection of a
    Qwen2/Llama block, as QLoRA recommends, arXiv 2305.14314)."""


class LearnerConfig(Section):
    groups_per_step: int = Field(64, ge=1)
    """Groups (prompts) per optimizer step: the batch size B of the staleness window."""
    lr: float = Field(2e-5, gt=0)
    """AdamW learning rate (constant after warmup). Small on purpose: the shipped model is
    annealed to a sharp minimum, and rates of 1e-4 and more knock it out first (docs/rl-notes.md)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warmup, in learner steps."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    warm_start_optimizer: bool = True
    """Copy AdamW's moments from ``optimizer.pt`` in the model folder when there is one
    (see :mod:`echo2.learner.optimizer`); False starts a fresh AdamW."""
    grad_clip: float = Field(1.0, gt=0)
    """Global gradient-norm clip."""
    micro_batch: int = Field(256, ge=1)
    """Sequences per forward/backward; gradients accumulate over micro-batches."""
    minibatches: int = Field(1, ge=1)
    """Optimizer updates per pass over a step's batch (the batch's sequences split evenly);
    the policy version still advances by one per learner step."""
    epochs: int = Field(1, ge=1)
    """Passes over a step's batch (PPO epochs)."""
    loss: Literal["grpo", "dr_grpo", "dapo", "gspo"] = "grpo"
    """Objective (:mod:`echo2.learner.objectives`, docs/objectives.md): ``grpo`` (DeepSeekMath),
    ``dr_grpo`` (no length or std normalisation), ``dapo`` (clip-higher, token-level mean,
    overlong shaping, dynamic sampling), ``gspo`` (sequence-level ratio). Fields left unset take
    the objective's published values (``OBJECTIVE_DEFAULTS``)."""
    clip_low: float = Field(0.2, ge=0)
    """PPO clip: a token whose ratio fell below ``1 - clip_low`` gets no gradient when its advantage
    is negative. Unset: the objective's value (0.2; gspo 3e-4)."""
    clip_high: float = Field(0.2, ge=0)
    """PPO clip: a token whose ratio rose above ``1 + clip_high`` gets no gradient when its advantage
    is positive. Unset: the objective's value (0.2; dapo 0.28; gspo 4e-4)."""
    std_normalize: bool = True
    """Divide group advantages by the group's reward std; False keeps only the mean baseline.
    Unset: the objective's choice (False for dr_grpo)."""
    correction: Literal["truncated", "decoupled", "none"] = "truncated"
    """Off-policy correction. ``truncated``: the clipped ratio is taken against the behaviour
    policy that generated the group, bounded by ``ratio_cap``; ``decoupled`` (AReaL): the clipped
    ratio is taken against the proximal policy (the learner's at the start of the step) and
    multiplied by the behaviour weight pi_prox / pi_behaviour truncated at ``ratio_cap``;
    ``none``: the clipped ratio against the proximal policy with no behaviour weight, treating a
    stale group as on-policy (what a trainer that recomputes "old" log-probs does) — a baseline
    for staleness studies, not a recommendation."""
    ratio_cap: float = Field(3.0, gt=1)
    """Truncation of the importance weight against the behaviour policy: with ``truncated`` the
    surrogate of a negative advantage never exceeds ``ratio_cap * |A|`` (dual clip); with
    ``decoupled`` the behaviour weight is capped at this value."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of a k3 KL penalty to the initial (reference) policy; 0 = off, no reference kept."""
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of an entropy bonus (mean token entropy of the policy); 0 = off."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: groups whose rewards are all equal are filtered out and replaced
    by new ones from the buffer. Unset: on for dapo, off otherwise."""
    dynamic_sampling_rounds: int = Field(10, ge=1)
    """Most batches drawn for one step under dynamic sampling; when they run out the step is
    topped up with filtered groups, so that it still trains on ``groups_per_step`` groups."""
    overlong_buffer: int | None = Field(None, ge=0)
    """DAPO's soft overlong punishment: completions within this many tokens of
    ``rollout.max_new_tokens`` lose reward linearly, up to ``overlong_penalty`` at the limit.
    None: a fifth of ``max_new_tokens`` for dapo, 0 (off) otherwise."""
    overlong_penalty: float = Field(1.0, ge=0)
    """Reward lost by a completion that reaches ``rollout.max_new_tokens`` (overlong shaping)."""
    success_reward: float = 1.0
    """Reward meaning verified success: a group is all-correct when every reward reaches it,
    all-wrong when none does and all are equal (degeneration metrics, EchoClip)."""
    echoclip: EchoClipConfig = Field(default_factory=EchoClipConfig)
    """EchoClip auxiliary loss on advantage-degenerated groups (off by default)."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """Train a LoRA adapter instead of the full weights (off by default)."""

    @property
    def effective_lr(self) -> float:
        """The learning rate AdamW uses: the adapter's own when a LoRA run sets one."""
        return self.lora.lr if self.lora.enabled and self.lora.lr is not None else self.lr
    master_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the parameters AdamW updates (the master weights; see
    :mod:`echo2.learner.precision`). float32 keeps updates of ~1e-6 that bf16 weights would round
    away; frozen parameters (a LoRA run's base) stay in ``model.dtype``."""
    threads: int = Field(1, ge=1)
    """Torch threads of the learner process."""
    device: str = "cpu"
    """Learner device: ``cpu``, ``cuda`` (under torchrun: the rank's GPU), ``cuda:N``, or ``auto``."""
    sharding: Literal["replicate", "fsdp"] = "replicate"
    """Under torchrun (``torchrun --nproc-per-node N -m echo2.cli train``; see
    :mod:`echo2.learner.distributed`): ``replicate`` keeps the whole model on every rank and sums
    gradients (DDP-style); ``fsdp`` shards parameters, gradients and AdamW states with FSDP2.
    Ignored in a single process."""

    @model_validator(mode="before")
    @classmethod
    def _objective_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("loss", "grpo") not in OBJECTIVE_DEFAULTS:
            return data
        defaults = OBJECTIVE_DEFAULTS[data.get("loss", "grpo")]
        return {**data, **{key: defaults[key] for key in defaults
                           if key in cls.model_fields and data.get(key) is None}}

    def overlong_tokens(self, max_new_tokens: int) -> int:
        """The overlong buffer in tokens for completions of at most ``max_new_tokens``."""
        if self.overlong_buffer is not None:
            return min(self.overlong_buffer, max_new_tokens)
        return round(OBJECTIVE_DEFAULTS[self.loss]["overlong_share"] * max_new_tokens)


class EvalConfig(Section):
    every: int = Field(10, ge=1)
    """Evaluate every this many learner steps (and before the first and after the last)."""
    size: int = Field(500, ge=1)
    """Held-out prompts per evaluation (never trained on)."""
    show: int = Field(4, ge=0)
    """Sample completions printed and logged per evaluation."""


class VerificationConfig(Section):
    """Spot checks of what workers submit (see :mod:`echo2.learner.verification`)."""

    rescore_fraction: float = Field(0.05, ge=0, le=1)
    """Share of groups whose rewards the learner recomputes with the task's verifier."""
    logprob_fraction: float = Field(0.02, ge=0, le=1)
    """Share of current-version groups whose behaviour log-probs the learner recomputes."""
    logprob_tolerance: float = Field(0.2, gt=0)
    """Mean absolute log-prob difference (nats/token) above which a worker is quarantined."""


class CheckpointConfig(Section):
    every: int = Field(50, ge=0)
    """Save a checkpoint every this many steps (0 = only at the end)."""


class CoordinatorConfig(Section):
    host: str = "127.0.0.1"
    """Interface the coordinator listens on (0.0.0.0 to let remote workers join)."""
    port: int = Field(0, ge=0, le=65535)
    """Port; 0 picks a free one."""
    token: str | None = None
    """Run token workers must present; generated and printed when not given."""
    lease_timeout_s: float = Field(60.0, gt=0)
    """A lease not submitted within this time is re-issued to another worker."""
    lease_wait_s: float = Field(2.0, ge=0)
    """How long a lease request may wait (long-poll) for the staleness window to open."""
    heartbeat_timeout_s: float = Field(30.0, gt=0)
    """A worker silent for this long is declared dead and its leases re-issued."""
    start_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the coordinator and the local workers to come up."""
    data_timeout_s: float = Field(300.0, gt=0)
    """How long the learner waits for one batch before failing with a clear error."""


class TelemetryConfig(Section):
    tensorboard: bool = True
    """Also write TensorBoard event files under ``RUN_DIR/tensorboard``."""
    progress: bool = True
    """Show a live progress line on the console."""


class Config(Section):
    """A whole run. ``protocol`` and ``staleness`` are the two knobs of asynchrony."""

    protocol: Literal["sync", "pull", "async"] = "async"
    """``sync``: on-policy barrier (S = 0); ``pull``: workers refresh to the newest weights before
    every lease; ``async``: push-pull, workers generate continuously and swap new weights in
    between requests."""
    staleness: int | None = Field(None, ge=0)
    """Bounded staleness S: step ``t`` trains only on groups generated by versions ``>= t - S``.
    Default: 0 for ``sync``, 1 otherwise. ``sync`` requires 0."""
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
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @model_validator(mode="after")
    def _resolve_staleness(self) -> Config:
        resolved = resolve_staleness(self.protocol, self.staleness)
        if resolved != self.staleness:  # (assigning re-runs validation when assignments are validated)
            self.staleness = resolved
        return self


def _parse_value(text: str) -> Any:
    """``key=value`` values are YAML scalars/collections: ``3``, ``1e-4``, ``true``, ``[1, 2]``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one dotted ``a.b.c=value`` override to the nested dict ``data`` in place."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {assignment!r}: expected key=value, e.g. learner.lr=1e-4")
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key '{key}': '{part}' is not a section")
        node = child
    node[parts[-1]] = _parse_value(value)


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(root)"
    if first["type"] == "extra_forbidden":
        return f"config key '{key}': unknown key"
    return f"config key '{key}': {first['msg']} (got {first.get('input')!r})"


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load ``path`` (YAML; optional) and apply ``overrides``; raise :class:`ConfigError` on any problem."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: not found") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {path}: not valid YAML ({str(error).splitlines()[0]})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: expected a mapping at the top level")
        data = loaded or {}
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None


def dump_config(config: Config) -> str:
    """The resolved config as YAML (what a run directory keeps)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
