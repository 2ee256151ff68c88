"""Scenarios for the simulator: the shipped recipe with some fields changed."""

from __future__ import annotations

from echo2.simulation.scenario import parse_scenario


def recipe(steps: int, groups_per_lease: int, staleness: int, heartbeat_interval_s: float) -> dict:
    """An async recipe of B = 8 groups of 4, workers beating every ``heartbeat_interval_s`` (a run's
    config derives the beat from the timeout: a quarter of it)."""
    return {"protocol": "async", "staleness": staleness, "run": {"steps": steps}, "learner": {"groups_per_step": 8},
            "rollout": {"group_size": 4, "groups_per_lease": groups_per_lease},
            "coordinator": {"lease_timeout_s": 3600.0, "heartbeat_timeout_s": 4 * heartbeat_interval_s}}


def scenario(**changes):
    """One learner step = 1 s; B = 8 groups of 4; a 10 MB payload; two fast local workers.
    ``section__key=value`` replaces a key (``recipe__run__steps=10``: a nested one), ``section=value``
    a whole section."""
    data = {
        "name": "tiny",
        "model": {"name": "m", "parameters_b": 0.005, "payload_gb": 0.01},
        "learner": {"train_step_s": 1.0},
        "recipe": recipe(steps=40, groups_per_lease=8, staleness=1, heartbeat_interval_s=0.01),
        "activation": {"enabled": False},
        "fleet": [{"name": "w", "count": 2, "rollouts_per_s": 320.0}],
    }
    for key, value in changes.items():
        *path, field = key.split("__")
        section = data
        for name in path:
            section = section.setdefault(name, {})
        section[field] = value
    return parse_scenario(data)

