"""A simulation scenario: every assumption of a run past this machine, as an explicit input (YAML).

A scenario names the model (what a version weighs on the wire, what a step costs to train), the
learner's hardware and price, the recipe (the run's own config: groups per step, protocol, staleness
bound S, lease and heartbeat timing), the workload (prompt and completion lengths),
the broadcast topology, cost-aware activation, and a fleet of worker classes with throughput,
price, bandwidth and latency distributions and preemption rates. Shipped scenarios live in
``configs/scenarios/``, each figure with its source in a comment. The centralized co-located
baseline (the learner's GPUs generating and training in turn) is priced from the same file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from echo2.config import Config
from echo2.config.base import ConfigError, Section, apply_override, first_error, merge, read_yaml
from echo2.config.fleet import ActivationRule, LearnerHardware, WorkerClass
from echo2.config.moved import move_keys
from echo2.planning.engine_curve import DecodeCurve, lease_rollouts_per_s, worker_curve
from echo2.planning.inventory import Inventory
from echo2.planning.inventory import LearnerSpec as InventoryLearner
from echo2.planning.lengths import LengthSampler, ResponseLengths
from echo2.units import GB, MIB

#: Share of a GPU's memory an inference engine takes for itself (vLLM's ``gpu_memory_utilization``
#: default); the trainer's resident memory and the weights come out of it, the rest is KV room.
ENGINE_MEMORY_SHARE = 0.9

__all__ = ["ActivationSpec", "BroadcastSpec", "LearnerSpec", "ModelSpec", "Scenario", "WorkerClass", "Workload",
           "dotted_overrides", "load_scenario", "parse_scenario"]


class ModelSpec(Section):
    name: str
    """Label only (e.g. ``Qwen3-8B``)."""
    parameters_b: float = Field(gt=0)
    """Total parameters, billions: sets the size of one version on the wire."""
    active_parameters_b: float | None = Field(None, gt=0)
    """Parameters used per token, billions (mixture-of-experts); sets the learner's FLOPs. None: all."""
    bytes_per_parameter: float = Field(2.0, gt=0)
    """Bytes per parameter on the wire (2 = bf16)."""
    payload_gb: float | None = Field(None, gt=0)
    """Size of one version, GB, overriding parameters x bytes (e.g. a LoRA adapter)."""
    kv_bytes_per_token: float | None = Field(None, gt=0)
    """KV cache of one token over every layer, bytes: 2 x layers x KV heads x head dim x 2 (bf16).
    Sets how many sequences the co-located engine holds beside the trainer."""

    @property
    def weights_bytes(self) -> float:
        """The whole model in an inference engine (bf16 by ``bytes_per_parameter``), adapter or not."""
        return self.parameters_b * GB * self.bytes_per_parameter

    @property
    def payload_bytes(self) -> float:
        return self.payload_gb * GB if self.payload_gb else self.parameters_b * GB * self.bytes_per_parameter

    @property
    def flops_parameters(self) -> float:
        return (self.active_parameters_b or self.parameters_b) * 1e9


class LearnerSpec(LearnerHardware):
    """The learner's hardware (``train_step_s``, ``upload_mbps``: see :class:`echo2.config.LearnerHardware`)."""

    gpus: int = Field(1, ge=1)
    """GPUs of the learner (they also form the centralized baseline)."""
    price_per_gpu_hour: float = Field(0.0, ge=0)
    """Dollars per GPU-hour of the learner's hardware."""
    peak_tflops_per_gpu: float = Field(989.0, gt=0)
    """Dense bf16 peak per GPU, TFLOP/s (989 = H100 SXM)."""
    mfu: float = Field(0.35, gt=0, le=1)
    """Model FLOP utilization the trainer achieves."""
    flops_per_token_per_parameter: float = Field(8.0, gt=0)
    """Training FLOPs per token per parameter: 6 for forward + backward, plus 2 for the forward pass
    that recomputes the behaviour policy's log-probs."""
    publish_s: float = Field(0.0, ge=0)
    """Seconds per version to serialise and chunk the weights (learner busy time)."""
    step_cv: float = Field(0.0, ge=0)
    """Coefficient of variation of the step time (lognormal jitter)."""
    generation_tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    """Completion tokens/s one learner GPU generates for this recipe (the centralized baseline);
    None: no baseline."""
    weight_sync_s: float = Field(0.0, ge=0)
    """Centralized baseline: seconds per step to hand new weights from the trainer to the
    co-located inference engine."""
    single_sequence_tokens_per_s: float | None = Field(None, gt=0)
    """Centralized baseline: tokens/s of one sequence decoding alone on one GPU's engine; with
    ``generation_sequences`` it makes the engine's throughput fall as a batch drains
    (:mod:`echo2.planning.engine_curve`). None: ``generation_tokens_per_s_per_gpu`` to the last token."""
    generation_sequences: int | None = Field(None, ge=2)
    """Sequences in flight at which ``generation_tokens_per_s_per_gpu`` was measured (the engine's
    ``max_num_seqs``): the most one GPU's engine runs at once unless memory allows fewer."""
    gpu_memory_gb: float | None = Field(None, gt=0)
    """Memory of one learner GPU, GB: with ``trainer_resident_gb`` and the model's
    ``kv_bytes_per_token``, how many sequences the co-located engine has KV room for."""
    trainer_resident_gb: float = Field(0.0, ge=0)
    """What the trainer keeps on each GPU while the co-located engine generates (sharded weights,
    gradients, optimizer states not offloaded), GB."""

    @model_validator(mode="after")
    def _curve_points(self) -> LearnerSpec:
        if self.single_sequence_tokens_per_s is not None and self.generation_sequences is None:
            raise ValueError("single_sequence_tokens_per_s needs generation_sequences (the batch "
                             "generation_tokens_per_s_per_gpu holds at)")
        return self

    def colocated_curve(self, model: ModelSpec, context_tokens: float) -> DecodeCurve | None:
        """One learner GPU's engine as it generates beside the trainer (None: no baseline)."""
        if self.generation_tokens_per_s_per_gpu is None:
            return None
        if self.single_sequence_tokens_per_s is None:
            return DecodeCurve.flat(self.generation_tokens_per_s_per_gpu)
        fit = None
        if self.gpu_memory_gb is not None and model.kv_bytes_per_token is not None:
            room = ENGINE_MEMORY_SHARE * self.gpu_memory_gb * GB - model.weights_bytes - self.trainer_resident_gb * GB
            fit = int(room // (model.kv_bytes_per_token * context_tokens))
            if fit < 1:
                raise ValueError(f"learner.trainer_resident_gb leaves the co-located engine no KV room: {self.gpu_memory_gb:g} GB x "
                                 f"{ENGINE_MEMORY_SHARE} - {model.weights_bytes / GB:.1f} GB of weights - "
                                 f"{self.trainer_resident_gb:g} GB of the trainer's")
        limit = min(self.generation_sequences, fit) if fit is not None else self.generation_sequences
        return DecodeCurve.through(self.single_sequence_tokens_per_s, self.generation_tokens_per_s_per_gpu,
                                   self.generation_sequences, limit)


class Workload(Section):
    """What a run's config cannot say about the work: how long its prompts and completions are."""

    prompt_tokens: float = Field(0.0, ge=0)
    """Mean prompt tokens (learner FLOPs only)."""
    response_tokens: float = Field(1.0, gt=0)
    """Mean completion tokens: converts tokens/s into rollouts/s, and sets the learner FLOPs
    (with measured ``lengths``: their mean, unless given)."""
    lengths: ResponseLengths | None = None
    """How lengths spread, per group (:mod:`echo2.planning.lengths`); None: every response
    ``response_tokens`` long."""

    @model_validator(mode="after")
    def _measured_mean(self) -> Workload:
        measured = self.lengths.measured_mean if self.lengths else None
        if measured is None:
            return self
        if "response_tokens" not in self.model_fields_set:
            self.response_tokens = measured
        elif abs(self.response_tokens - measured) > 0.02 * measured:
            raise ValueError(f"response_tokens={self.response_tokens:g} but the measured lengths average "
                             f"{measured:.1f}: leave response_tokens out")
        return self

    def sampler(self) -> LengthSampler:
        """Each group's lengths, drawn (:class:`echo2.planning.lengths.LengthSampler`)."""
        return LengthSampler(self.lengths, self.response_tokens)


class BroadcastSpec(Section):
    mode: Literal["star", "pipelined"] = "pipelined"
    """``star``: every worker fetches from the learner; ``pipelined``: relay chains/trees."""
    chunk_mib: float = Field(1.0, gt=0)
    """Chunk size, MiB (one chunk per hop fills the pipeline)."""
    fan_out: int = Field(1, ge=0)
    """Children per relaying worker (1 = chains)."""
    learner_fan_out: int = Field(1, ge=1)
    """Workers fetching from the learner directly in a pipelined plan."""
    stall_s: float = Field(10.0, gt=0)
    """The workers' ``broadcast.stall_s``: a relay that holds nothing new of the version asked for
    is waited for twice (stall + long-poll) before the next source of the fallback chain."""


class ActivationSpec(ActivationRule):
    """The provisioning rule as in a real run's config, plus what a parked worker costs."""

    parked_price_fraction: float = Field(0.0, ge=0, le=1)
    """Share of its price a parked worker costs. echo2 keeps parked workers registered and warm
    (instant re-activation, still relaying) and bills them 0, i.e. assumes they cost nothing while
    parked; 1.0 prices keeping them warm."""


class Scenario(Section):
    name: str
    """Scenario name (the output folder's default name)."""
    description: str = ""
    """What the scenario stands for."""
    seed: int = 0
    """Seed of every random draw (uplinks, jitter, preemptions)."""
    model: ModelSpec
    learner: LearnerSpec
    recipe: Config
    """The run's own config (echo2's keys: ``protocol``, ``staleness``, ``run.steps``,
    ``learner.groups_per_step``, ``rollout.group_size``, ``rollout.groups_per_lease``,
    ``coordinator.lease_timeout_s`` / ``window_share`` / ``heartbeat_*``), validated and defaulted
    as ``echo2 train`` does: the simulator reads the recipe from it, not from a copy."""
    workload: Workload = Workload()
    broadcast: BroadcastSpec = BroadcastSpec()
    activation: ActivationSpec = ActivationSpec()
    fleet: list[WorkerClass] = Field(min_length=1)

    @model_validator(mode="after")
    def _baseline_fits(self) -> Scenario:
        """The co-located engine's curve and KV room, checked when the file is read, not mid-run."""
        self.learner.colocated_curve(self.model, self.workload.prompt_tokens + self.workload.response_tokens)
        return self

    @field_validator("recipe", mode="before")
    @classmethod
    def _moved_recipe_keys(cls, recipe: object) -> object:
        """A recipe written before keys moved (:mod:`echo2.config.moved`) loads as a run config does."""
        if isinstance(recipe, dict):
            recipe = copy.deepcopy(recipe)
            move_keys(recipe, "the scenario's recipe")
        return recipe

    def train_compute_s(self) -> float:
        """Training alone (no publishing): measured, or FLOPs per step over the learner's achieved FLOP/s."""
        learner, workload = self.learner, self.workload
        if learner.train_step_s is not None:
            return max(learner.train_step_s - learner.publish_s, 0.0)
        tokens = self.recipe.rollouts_per_step * (workload.prompt_tokens + workload.response_tokens)
        flops = learner.flops_per_token_per_parameter * self.model.flops_parameters * tokens
        return flops / (learner.gpus * learner.peak_tflops_per_gpu * 1e12 * learner.mfu)

    def train_step_s(self) -> float:
        """T_train of the distributed learner: training plus publishing the new version."""
        return self.train_compute_s() + self.learner.publish_s

    @property
    def learner_price_per_hour(self) -> float:
        return self.learner.gpus * self.learner.price_per_gpu_hour

    def inventory(self) -> Inventory:
        """The same figures as an ``echo2 plan`` inventory (the capacity model's view of the scenario)."""
        learner = self.learner
        generation = (learner.gpus * learner.generation_tokens_per_s_per_gpu / self.workload.response_tokens
                      if learner.generation_tokens_per_s_per_gpu else None)
        return Inventory(
            learner=InventoryLearner(price_per_hour=self.learner_price_per_hour, train_step_s=self.train_step_s(),
                                     upload_mbps=learner.upload_mbps, payload_mib=self.model.payload_bytes / MIB,
                                     generation_rollouts_per_s=generation),
            workers=self.lease_rated_fleet(), response_tokens=self.workload.response_tokens)

    def lease_rated_fleet(self) -> list[WorkerClass]:
        """The fleet at the rates its leases drain at: a class whose engine slows as a batch drains,
        or any class when lengths vary, at :func:`echo2.planning.engine_curve.lease_rollouts_per_s`
        of its lease size; the others as declared."""
        sampler, size = self.workload.sampler(), self.recipe.rollout.group_size
        return [spec if spec.single_sequence_tokens_per_s is None and not sampler.varies else spec.model_copy(update={
                    "tokens_per_s": None,
                    "rollouts_per_s": lease_rollouts_per_s(worker_curve(spec, self.workload.response_tokens),
                                                           lambda rng: sampler.group(rng, size),
                                                           self.recipe.lease_groups, self.seed)})
                for spec in self.fleet]

    def inputs(self) -> dict:
        """The scenario as given (the recipe's keys as set, with the staleness it resolves to)."""
        data = self.model_dump(mode="json")
        data["recipe"] = {"protocol": self.recipe.protocol, "staleness": self.recipe.staleness,
                          **self.recipe.model_dump(mode="json", exclude_unset=True)}
        return data


def load_scenario(path: str | Path, overrides: dict | None = None) -> Scenario:
    """Read a scenario YAML (plus nested ``overrides``, see :func:`dotted_overrides`); errors
    (:class:`ConfigError`, a ``ValueError``) name the file and the key."""
    return parse_scenario(merge(read_yaml(path, "scenario"), overrides or {}), str(path))


def parse_scenario(data: dict, origin: str = "scenario") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{origin}: {first_error(error)}") from None


def dotted_overrides(pairs: list[str]) -> dict:
    """``["recipe.staleness=2", "fleet.0.count=50"]`` as a nested dict (values parsed as YAML);
    :func:`load_scenario` merges it, an integer key indexing a list (the fleet's classes)."""
    result: dict = {}
    for pair in pairs:
        apply_override(result, pair)
    return result
