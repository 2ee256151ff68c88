"""The learner's section of a run config: objective, optimizer, EchoClip, LoRA, precision."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from echo2.config.base import Section, builtin_or_path

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
    adapter (see :mod:`echo2.model.lora`). Needs ``pip install 'echo2[lora]'``."""

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
    loss: str = "grpo"
    """Objective (:mod:`echo2.learner.objectives`, docs/objectives.md): ``grpo`` (DeepSeekMath),
    ``dr_grpo`` (no length or std normalisation), ``dapo`` (clip-higher, token-level mean,
    overlong shaping, dynamic sampling), ``gspo`` (sequence-level ratio), or ``module:name``
    naming an :class:`echo2.learner.objectives.Objective` of your own. Fields left unset take the
    objective's published values (``OBJECTIVE_DEFAULTS``; grpo's for one of your own)."""
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
    master_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the parameters AdamW updates (the master weights; see
    :mod:`echo2.learner.precision`). float32 keeps updates of ~1e-6 that bf16 weights would round
    away; frozen parameters (a LoRA run's base) stay in ``model.dtype``."""
    threads: int = Field(1, ge=1)
    """Torch threads of the learner process."""
    cpus: list[int] | None = None
    """CPUs the learner process (and the coordinator in it) may run on, e.g. ``[0]`` (Linux; None:
    any). With ``workers.cpus`` it keeps local workers off the learner's cores on one machine."""
    device: str = "cpu"
    """Learner device: ``cpu``, ``cuda`` (under torchrun: the rank's GPU), ``cuda:N``, or ``auto``."""
    sharding: Literal["replicate", "fsdp"] = "replicate"
    """Under torchrun (``torchrun --nproc-per-node N -m echo2.cli train``; see
    :mod:`echo2.learner.distributed`): ``replicate`` keeps the whole model on every rank and sums
    gradients (DDP-style); ``fsdp`` shards parameters, gradients and AdamW states with FSDP2.
    Ignored in a single process."""

    @property
    def effective_lr(self) -> float:
        """The learning rate AdamW uses: the adapter's own when a LoRA run sets one."""
        return self.lora.lr if self.lora.enabled and self.lora.lr is not None else self.lr

    @field_validator("loss")
    @classmethod
    def _known_objective(cls, loss: str) -> str:
        return builtin_or_path(loss, OBJECTIVE_DEFAULTS, "learner.loss", "objective")

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
        return round(OBJECTIVE_DEFAULTS.get(self.loss, OBJECTIVE_DEFAULTS["grpo"])["overlong_share"] * max_new_tokens)
