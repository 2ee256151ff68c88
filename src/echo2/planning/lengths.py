"""Response lengths as a distribution, per prompt group: what a synchronous step waits for.

A planner that sets every response to the mean length prices synchronous generation as if the
engine stayed full to the last token. It does not: a step's batch drains, and the step waits for
its longest response (one verl run's per-sample generation took 18.7 s to 539.5 s, mean 266.6 s,
verl#7412; "99% of samples done in 40 s, the last 1% take 80 s more"). The responses of one prompt
have correlated lengths (Seer, arXiv 2511.14617), lengths are heavy-tailed across prompts, and a
share of them stops at the cap (7.5% to 60% depending on the model). Two forms, both drawn a group
at a time so the correlation stays:

* **parametric**: ``log L = A + W``, the group's ``A ~ N(mu, s_a^2)`` (``across_cv``) and each
  response's ``W ~ N(0, s_w^2)`` (``within_cv``), cut at ``max_tokens``. The marginal is lognormal
  with ``s^2 = s_a^2 + s_w^2``, whose capped mean has a closed form: ``mu`` is solved from it (by
  bisection) for the capped mean to be the workload's ``response_tokens``; the share at the cap
  follows (:attr:`LengthSampler.capped_share`).
* **measured**: ``groups``, a run's own completion lengths per group (``echo2 calibrate`` writes
  them); a group is drawn whole and resampled to the scenario's group size.

No distribution: every response is the mean, the planner's figures as before.
"""

from __future__ import annotations

import math
import random
import statistics

from pydantic import Field, model_validator

from echo2.config.base import Section


class ResponseLengths(Section):
    """How long a task's responses are, per group (see the module docstring)."""

    source: str = ""
    """Where the figures come from (a paper, an issue, a calibration run)."""
    max_tokens: float | None = Field(None, gt=0)
    """The cap (``rollout.max_new_tokens``): a point mass of responses cut there."""
    across_cv: float = Field(0.0, ge=0)
    """Spread of a group's typical length across prompts (coefficient of variation, lognormal)."""
    within_cv: float = Field(0.0, ge=0)
    """Spread of the responses of one prompt around their group's length."""
    groups: list[list[float]] = []
    """Measured: each group's completion lengths, tokens (instead of the parametric form)."""

    @model_validator(mode="after")
    def _one_form(self) -> ResponseLengths:
        parametric = self.across_cv > 0 or self.within_cv > 0
        if self.groups and parametric:
            raise ValueError("give measured groups or across_cv/within_cv, not both")
        if parametric and self.max_tokens is None:
            raise ValueError("a parametric length distribution needs max_tokens (the cap)")
        if any(not group or min(group) <= 0 for group in self.groups):
            raise ValueError("every measured group needs at least one length, each > 0")
        if self.groups and self.max_tokens is not None and max(map(max, self.groups)) > self.max_tokens:
            raise ValueError(f"a measured length exceeds max_tokens={self.max_tokens:g}")
        return self

    @property
    def measured_mean(self) -> float | None:
        """The measured groups' mean length (None: parametric)."""
        return statistics.fmean(x for group in self.groups for x in group) if self.groups else None


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def _sigma2(cv: float) -> float:
    """Variance of ``log X`` for a lognormal ``X`` with coefficient of variation ``cv``."""
    return math.log1p(cv * cv)


def capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """``E[min(X, cap)]`` for ``log X ~ N(mu, sigma^2)``."""
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma * sigma / 2) * _phi(z - sigma) + cap * (1 - _phi(z))


class LengthSampler:
    """Draws each group's response lengths from :class:`ResponseLengths` with mean ``mean``
    (None: every response ``mean`` tokens, no random draw)."""

    def __init__(self, lengths: ResponseLengths | None, mean: float) -> None:
        self.lengths, self.mean = lengths, mean
        self._sigma_across = math.sqrt(_sigma2(lengths.across_cv)) if lengths else 0.0
        self._sigma_within = math.sqrt(_sigma2(lengths.within_cv)) if lengths else 0.0
        self._sigma = math.hypot(self._sigma_across, self._sigma_within)
        self._mu = self._solve_mu() if self._sigma > 0 else math.log(mean)

    def _solve_mu(self) -> float:
        """``mu`` whose capped marginal has mean :attr:`mean` (bisection: the capped mean rises with ``mu``)."""
        cap = self.lengths.max_tokens
        if not self.mean < cap:
            raise ValueError(f"response_tokens={self.mean:g} must be below max_tokens={cap:g}")
        low, high = math.log(self.mean) - 10 * self._sigma - 10, math.log(cap) + 10 * self._sigma + 10
        for _ in range(200):
            middle = (low + high) / 2
            if capped_lognormal_mean(middle, self._sigma, cap) < self.mean:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    @property
    def varies(self) -> bool:
        return bool(self.lengths and (self.lengths.groups or self._sigma > 0))

    @property
    def capped_share(self) -> float:
        """Share of responses cut at the cap."""
        lengths = self.lengths
        if lengths is None or lengths.max_tokens is None:
            return 0.0
        if lengths.groups:
            flat = [x for group in lengths.groups for x in group]
            return sum(x >= lengths.max_tokens for x in flat) / len(flat)
        if self._sigma == 0:
            return float(self.mean >= lengths.max_tokens)
        return 1 - _phi((math.log(lengths.max_tokens) - self._mu) / self._sigma)

    def group(self, rng: random.Random, size: int) -> list[float]:
        """One group's ``size`` response lengths, tokens."""
        lengths = self.lengths
        if lengths is None or not self.varies:
            return [self.mean] * size
        if lengths.groups:
            measured = rng.choice(lengths.groups)
            return measured[:] if len(measured) == size else [rng.choice(measured) for _ in range(size)]
        centre = rng.gauss(self._mu, self._sigma_across)
        return [max(1.0, min(lengths.max_tokens, math.exp(rng.gauss(centre, self._sigma_within))))
                for _ in range(size)]
