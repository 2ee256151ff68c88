"""The typed schemas of echo2: a run's config (``echo2 train``) and the hardware shared with the
inventory (``echo2 plan``) and the scenario (``echo2 simulate``).

* :mod:`echo2.config.base` — the one pydantic base :class:`Section`, :class:`ConfigError`,
  YAML files and dotted ``key=value`` overrides;
* :mod:`echo2.config.asynchrony` — the protocol and the staleness bound;
* :mod:`echo2.config.learner` — the learner's section (objective, optimizer, EchoClip, LoRA);
* :mod:`echo2.config.evaluation` — the ``eval`` section;
* :mod:`echo2.config.fleet` — worker classes, the learner's hardware, the activation rule;
* :mod:`echo2.config.run` — every other section, :class:`Config`, :func:`load_config`.

Every field is documented where it is declared (the docstring under it becomes its description).
Also: ``service.py`` (the ``service`` section of ``echo2 serve``), ``agent.py`` (the ``agent``
section of an agent run), ``moved.py`` (keys that moved, so an older config still loads, with a
warning) and ``keys.py`` (the keys users set, ``echo2 train --help-config``).
"""

from echo2.config.base import ConfigError, Section, apply_override, first_error, merge, read_yaml
from echo2.config.fleet import ActivationRule, LearnerHardware, LocalWorkerSpec, WorkerClass
from echo2.config.learner import OBJECTIVE_DEFAULTS, EchoClipConfig, LearnerConfig, LoraConfig
from echo2.config.run import (
                              ActivationConfig,
                              BroadcastConfig,
                              CheckpointConfig,
                              Config,
                              CoordinatorConfig,
                              EmulationConfig,
                              EvalConfig,
                              LimitsConfig,
                              ModelConfig,
                              RayConfig,
                              RolloutConfig,
                              RunConfig,
                              TaskConfig,
                              TelemetryConfig,
                              VerificationConfig,
                              WorkersConfig,
                              dump_config,
                              load_config,
)

__all__ = [
    "ActivationConfig", "ActivationRule", "BroadcastConfig", "CheckpointConfig", "Config", "ConfigError",
    "CoordinatorConfig", "EchoClipConfig", "EmulationConfig", "EvalConfig", "LimitsConfig", "LearnerConfig",
    "LearnerHardware", "LocalWorkerSpec", "LoraConfig", "ModelConfig", "OBJECTIVE_DEFAULTS", "RayConfig",
    "RolloutConfig", "RunConfig", "Section", "TaskConfig", "TelemetryConfig", "VerificationConfig", "WorkerClass",
    "WorkersConfig", "apply_override", "dump_config", "first_error", "load_config", "merge", "read_yaml",
]
