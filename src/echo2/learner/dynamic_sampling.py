"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, section 3.2): a group whose
rewards are all equal has zero advantages and teaches nothing, so it is filtered out and
replaced by new groups from the buffer until the step has ``size`` informative ones.

The draws are bounded (``rounds``): when they run out, the last draw's degenerate groups stay
in the batch, so that a step always trains on ``size`` groups and the pacing window keeps moving
even when nearly every group is degenerate (e.g. a policy that solves everything). The filtered
groups are returned too: EchoClip learns from the all-success ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from echo2.exchange import Group
from echo2.learner.objectives import is_degenerate


@dataclass
class Sampled:
    groups: list[Group]
    filtered: list[Group]
    """Degenerate groups dropped (and replaced)."""
    drawn: int
    """Groups drawn in all, filtered ones included."""


def informative_batch(take: Callable[[int], list[Group]], drop: Callable[[list[Group]], None], size: int,
                      rounds: int) -> Sampled:
    """Draw with ``take(n)`` (at most n groups) until ``size`` groups are not degenerate; the
    degenerate ones go to ``drop``, except those of the last of ``rounds`` draws."""
    kept: list[Group] = []
    filtered: list[Group] = []
    drawn = 0
    for round_ in range(1, rounds + 1):
        batch = take(size - len(kept))
        drawn += len(batch)
        kept += [g for g in batch if not is_degenerate(g.rewards)]
        degenerate = [g for g in batch if is_degenerate(g.rewards)]
        if round_ == rounds:
            kept += degenerate
        elif degenerate:
            drop(degenerate)
            filtered += degenerate
        if len(kept) >= size:
            break
    return Sampled(groups=kept, filtered=filtered, drawn=drawn)
