"""A worker inventory: what could be rented, at what price, doing how much (YAML, for ``echo2 plan``).

Every figure is an input the user states (and should source); nothing here is measured. At run
time the coordinator replaces throughputs with measured ones (:mod:`echo2.planning.activation`).
Worker classes are the one :class:`echo2.config.WorkerClass` schema that scenarios use too (the
simulator-only fields are accepted and ignored here).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from echo2.config.base import ConfigError, Section, first_error, read_yaml
from echo2.config.fleet import LearnerHardware, WorkerClass

__all__ = ["Inventory", "LearnerSpec", "WorkerClass", "first_error", "load_inventory"]


class LearnerSpec(LearnerHardware):
    train_step_s: float = Field(gt=0)
    """T_train: seconds per optimizer step (measure it: ``learner_busy_s / steps`` of a run)."""
    price_per_hour: float = Field(ge=0)
    """Dollars per hour of the learner's (premium) hardware; also the price of the centralized
    counterfactual, where the same hardware would generate the rollouts too."""
    payload_mib: float = Field(gt=0)
    """Bytes of one version on the wire, MiB (parameters x bytes per parameter, or the LoRA adapter)."""
    fixed_broadcast_s: float = Field(0.0, ge=0)
    """Seconds a version takes to reach the workers besides its transfer (publishing, announcing,
    fetch set-up; ``echo2 calibrate`` measures it)."""
    generation_rollouts_per_s: float | None = Field(None, gt=0)
    """Rollouts/s the learner's own hardware would generate in the centralized setup (for the
    counterfactual's wall time); None: not compared."""


class Inventory(Section):
    learner: LearnerSpec
    workers: list[WorkerClass] = Field(min_length=1)
    response_tokens: float | None = Field(None, gt=0)
    """Mean completion tokens: converts the ``tokens_per_s`` of a worker class into rollouts/s
    (needed only when a class states its throughput in tokens)."""

    @model_validator(mode="after")
    def _rates_known(self) -> Inventory:
        for worker_class in self.workers:
            worker_class.rollout_rate(self.response_tokens)  # raises when tokens_per_s cannot be converted
        return self

    def throughput(self, worker_class: WorkerClass) -> float:
        """Rollouts/s one worker of ``worker_class`` delivers, discounted for preemptions."""
        return worker_class.effective_rollouts_per_s(self.response_tokens)


def load_inventory(path: str | Path) -> Inventory:
    """Read an inventory YAML; errors (:class:`ConfigError`, a ``ValueError``) name the file and the key."""
    data = read_yaml(path, "inventory")
    try:
        return Inventory.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {first_error(error)}") from None
