"""A worker inventory: what could be rented, at what price, doing how much (YAML, for ``echo2 plan``).

Every figure is an input the user states (and should source); nothing here is measured. At run
time the coordinator replaces throughputs with measured ones (:mod:`echo2.planning.activation`).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class LearnerSpec(_Section):
    price_per_hour: float = Field(ge=0)
    """Dollars per hour of the learner's (premium) hardware; also the price of the centralized
    counterfactual, where the same hardware would generate the rollouts too."""
    train_step_s: float = Field(gt=0)
    """T_train: seconds per optimizer step (measure it: ``learner_busy_s / steps`` of a run)."""
    upload_mbps: float = Field(gt=0)
    """The learner's uplink, Mbit/s."""
    payload_mib: float = Field(gt=0)
    """Bytes of one version on the wire, MiB (parameters x bytes per parameter, or the LoRA adapter)."""
    generation_rollouts_per_s: float | None = Field(None, gt=0)
    """Rollouts/s the learner's own hardware would generate in the centralized setup (for the
    counterfactual's wall time); None: not compared."""


class WorkerClass(_Section):
    name: str
    """Class name (e.g. ``rtx4090-spot``)."""
    count: int = Field(1, ge=1)
    """How many of this class can be had."""
    price_per_hour: float = Field(ge=0)
    """Dollars per hour per worker while active."""
    rollouts_per_s: float = Field(gt=0)
    """Completions per second one worker generates for this run's model and lengths."""
    upload_mbps: float = Field(100.0, gt=0)
    """Uplink of one worker, Mbit/s (matters when it relays weights)."""
    preemption_per_hour: float = Field(0.0, ge=0)
    """Expected preemptions per worker-hour (spot instances)."""
    recovery_s: float = Field(300.0, ge=0)
    """Throughput lost per preemption: restart, reload, re-fetch the weights, lost lease."""

    @property
    def effective_rollouts_per_s(self) -> float:
        """Throughput discounted by the time lost to preemptions: ``mu * (1 - rate * recovery / 3600)``."""
        return self.rollouts_per_s * max(0.0, 1.0 - self.preemption_per_hour * self.recovery_s / 3600)


class Inventory(_Section):
    learner: LearnerSpec
    workers: list[WorkerClass] = Field(min_length=1)


def load_inventory(path: str | Path) -> Inventory:
    """Read an inventory YAML; errors name the file and the offending key."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read inventory {path}: {error}") from None
    try:
        return Inventory.model_validate(data)
    except ValidationError as error:
        raise ValueError(f"{path}: {first_error(error)}") from None


def first_error(error: ValidationError) -> str:
    """``where: what`` of the first problem pydantic found (one line for a YAML input file)."""
    first = error.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
