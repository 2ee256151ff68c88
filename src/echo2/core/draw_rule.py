"""The verifiable draw rule's keys and uniforms, pure (no torch): the coordinator keys a lease's
rows with it, engines and audits draw with it (:mod:`echo2.model.draws` says why and how).

``uniform(seed, row, position)``: SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) applied to the
key's three words one after another, its top 53 bits as a float in [0, 1). Integer arithmetic on
Python ints: the same value on every machine and device.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK64 = (1 << 64) - 1
ROW_BITS = 20
"""A row key is ``slot << ROW_BITS | index``: up to 2^20 completions of one slot."""


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed: int, row: int, position: int) -> float:
    """The draw for ``position`` of row ``row`` under ``seed``: a float64 in [0, 1)."""
    x = splitmix64(splitmix64(splitmix64(seed & MASK64) ^ (row & MASK64)) ^ (position & MASK64))
    return (x >> 11) * 2.0**-53


def row_key(slot: int, index: int) -> int:
    """The row of completion ``index`` of a lease's ``slot`` (a task's group, a sampling request)."""
    return (slot << ROW_BITS) | index


def request_draw(seed: int | None, slot: int, index: int, draw_seed: int) -> tuple[int, int]:
    """The draw key of completion ``index`` of a sampling request on ``slot`` of a lease of
    ``draw_seed``: the request's own ``seed`` and row ``index`` when it gave one (the same
    completions in any lease), else the lease's seed and the slot's row."""
    return (seed, index) if seed is not None else (draw_seed, row_key(slot, index))


def turn_uniforms(token_count: int, mask: Sequence[int], turn_draws: Sequence[tuple[int, int, int]]) -> list[float | None]:
    """Each token's uniform in a completion of ``token_count`` tokens whose model turns (the runs of
    1 in ``mask``) were drawn with ``turn_draws`` (per turn: seed, row, the position of its first
    token); None at the tokens an environment inserted."""
    out: list[float | None] = [None] * token_count
    turn, position, previous = -1, 0, 0
    for index in range(token_count):
        if not mask[index]:
            previous = 0
            continue
        if not previous:
            turn += 1
            seed, row, position = turn_draws[turn]
        out[index] = uniform(seed, row, position)
        position += 1
        previous = 1
    return out
