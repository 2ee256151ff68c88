"""The run config's keys, and the few a user sets: what ``echo2 train --help-config`` lists.

The config has well over a hundred keys (``--help-config=all`` lists them), most of them the
tuning of a defence, of a server or of the one-machine emulation of a WAN fleet, each with a
default that holds. A user training a model sets the ones in :data:`USER_KEYS`; the listing
shows each with its default and the first sentence of its docstring, so that the answer to
"what do I set?" is one screen, not a schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from echo2.config.run import Config

#: The keys a user sets to train a model: what it is, on what, how long, where, how asynchronous.
USER_KEYS: tuple[str, ...] = (
    "model.name", "task.name", "task.options", "run.steps", "run.name", "run.seed", "protocol", "staleness",
    "workers.count", "workers.device", "learner.device", "learner.lr", "learner.loss", "learner.groups_per_step",
    "learner.lora.enabled", "rollout.group_size", "rollout.max_new_tokens", "rollout.temperature",
    "rollout.groups_per_lease", "rollout.engine", "eval.every", "checkpoint.every", "activation.enabled",
    "coordinator.host", "coordinator.port",
)


@dataclass(frozen=True)
class Key:
    """One key of the config: its dotted name, its default and the first sentence of its docstring."""

    name: str
    default: Any
    summary: str


def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[Key]:
    """Every leaf key of ``model``, sections walked into, in the schema's order."""
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from config_keys(field.annotation, f"{prefix}{name}.")
            continue
        default = field.default_factory() if field.default is PydanticUndefined and field.default_factory else field.default
        yield Key(f"{prefix}{name}", default, first_sentence(field.description or ""))


def first_sentence(docstring: str) -> str:
    """A field docstring's first sentence, as plain text for a terminal (reST roles and double
    backquotes dropped; ``e.g.`` does not end a sentence: a sentence ends before a capital)."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", " ".join(docstring.split())).replace("``", "`")
    return re.split(r"\.\s+(?=[A-Z])", text, maxsplit=1)[0].rstrip(".")


def help_lines(every_key: bool = False) -> list[str]:
    """The listing: the keys users set (``every_key``: all of them), ``key = default  summary``."""
    keys = list(config_keys())
    shown = keys if every_key else sorted((k for k in keys if k.name in USER_KEYS), key=lambda k: USER_KEYS.index(k.name))
    width = max(len(f"{k.name} = {k.default!r}") for k in shown)
    lines = [f"{f'{k.name} = {k.default!r}':<{width}}  {k.summary}" for k in shown]
    tail = ("" if every_key else
            f"\n{len(shown)} of the {len(keys)} keys: the rest tune the defences (limits:), the servers and the emulation of a "
            "WAN fleet on one machine (emulation:; echo2 train --help-config=all). Set any as key=value, or in a --config YAML.")
    return lines + ([tail] if tail else [])
