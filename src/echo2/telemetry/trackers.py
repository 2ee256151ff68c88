"""Experiment trackers beside TensorBoard: Weights & Biases and trackio, both optional and offline.

Each tracker run is given the run's resolved config as ``RUN_DIR/config.yaml`` keeps it
(``coordinator.token`` redacted) and, through :class:`echo2.telemetry.metrics.MetricsWriter`,
exactly the scalars TensorBoard gets, at the same steps. Both keep their files in the run
directory: ``RUN_DIR/wandb/offline-run-*`` (``wandb sync`` uploads it later) and
``RUN_DIR/trackio/<project>.db`` (trackio's local SQLite store). A resumed run starts a new
tracker run of the same name, from the step it resumes at.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from echo2.config.run import shareable_config

if TYPE_CHECKING:
    from echo2.config import Config


class Tracker(Protocol):
    """A started tracker run, as ``wandb.init`` and ``trackio.init`` return them."""

    def log(self, data: dict[str, Any], /, step: int | None = None) -> Any: ...

    def finish(self) -> Any: ...


def open_trackers(config: Config, run_dir: Path) -> list[Tracker]:
    """A started run in each tracker ``config.telemetry`` turns on (none by default)."""
    telemetry, shared = config.telemetry, shareable_config(config)
    trackers: list[Tracker] = []
    if telemetry.wandb:
        trackers.append(start_wandb(run_dir, telemetry.wandb_project, telemetry.wandb_mode, shared))
    if telemetry.trackio:
        trackers.append(start_trackio(run_dir, telemetry.trackio_project, shared))
    return trackers


def start_wandb(run_dir: Path, project: str, mode: Literal["offline", "online"], config: dict[str, Any]) -> Tracker:
    """A W&B run named after the run directory, its files under ``RUN_DIR/wandb``."""
    wandb = _require("wandb")
    # no console capture and no system metadata: both would copy the command line (which may
    # carry coordinator.token=...) or whatever the process prints into what W&B uploads
    settings = wandb.Settings(console="off", x_disable_meta=True)
    return wandb.init(project=project, dir=run_dir, name=run_dir.name, mode=mode, config=config, settings=settings)


def start_trackio(run_dir: Path, project: str, config: dict[str, Any]) -> Tracker:
    """A trackio run named after the run directory, in trackio's local store: ``RUN_DIR/trackio``
    unless ``$TRACKIO_DIR`` names another. trackio reads ``$TRACKIO_DIR`` once, on its first
    import, so a later run in the same process logs where the first one did."""
    if "trackio" not in sys.modules and not os.environ.get("TRACKIO_DIR"):  # trackio ignores an empty one too
        os.environ["TRACKIO_DIR"] = str(run_dir / "trackio")
    trackio = _require("trackio")
    return trackio.init(project=project, name=run_dir.name, config=config)


def _require(name: str) -> ModuleType:
    """``import name``, or an ImportError that says which extra installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"telemetry.{name}=true needs the {name} package: pip install 'echo2[{name}]'") from error
