"""A small reasoning-gym ``chain_sum`` task for the reasoning-gym tests."""

from __future__ import annotations

from echo2.tasks import load_task

CHAIN_SUM = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


def chain_sum(**options) -> object:
    return load_task("reasoning_gym", {**CHAIN_SUM, **options})

