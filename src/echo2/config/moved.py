"""Run-config keys that moved, and where to. A config written before they moved keeps loading
(a user's YAML, the ``config.yaml`` of a run directory that ``--resume`` reads): each old key
is moved to its new place, with a warning naming both."""

from __future__ import annotations

import logging
from typing import Any

from echo2.config.base import ConfigError

log = logging.getLogger("echo2")

#: old dotted key -> its place now. The one-machine emulation of a remote fleet went to
#: ``emulation:`` and the server's defence tuning to ``limits:``, out of the sections a user
#: reads to set up a real run.
MOVED: dict[str, str] = {
    "workers.fetch_delay_s": "emulation.fetch_delay_s",
    "workers.upload_mbps": "emulation.worker_upload_mbps",
    "workers.fleet": "emulation.fleet",
    "workers.colocated": "emulation.colocated",
    "broadcast.learner_upload_mbps": "emulation.learner_upload_mbps",
    "broadcast.learner_latency_ms": "emulation.learner_latency_ms",
    "coordinator.head_timeout_s": "limits.head_timeout_s",
    "coordinator.body_timeout_s": "limits.body_timeout_s",
    "coordinator.registrations_burst": "limits.registrations_burst",
    "coordinator.registrations_per_minute": "limits.registrations_per_minute",
}


def move_keys(data: dict[str, Any], where: str) -> None:
    """Move each old key of the nested mapping ``data`` (read from ``where``) to its new place; an
    old key beside its new one is a :class:`ConfigError`, since either could be the one meant."""
    for old, new in MOVED.items():
        section, _, name = old.partition(".")
        parent = data.get(section)
        if not isinstance(parent, dict) or name not in parent:
            continue
        value = parent.pop(name)
        new_section, _, new_name = new.partition(".")
        target = data.setdefault(new_section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"config key '{new_section}' ({where}): expected a section")
        if new_name in target:
            raise ConfigError(f"config keys '{old}' and '{new}' ({where}): {old} is the old name of {new}; keep one")
        target[new_name] = value
        log.warning("config key %s (%s) is now %s: it still loads, under its new name", old, where, new)


def moved_override(assignment: str) -> str:
    """A dotted ``key=value`` override with an old key (or a key under one) renamed to its new place."""
    key, sep, value = assignment.partition("=")
    for old, new in MOVED.items():
        if key == old or key.startswith(old + "."):
            log.warning("config key %s is now %s: it still loads, under its new name", old, new)
            return new + key[len(old):] + sep + value
    return assignment
