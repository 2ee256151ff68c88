"""What cost-aware activation sizes a training service's fleet by: its clients' steps.

ECHO-2's provisioning rule (arXiv 2602.02192, §4; :mod:`echo2.planning.activation_rule`) keeps the
cheapest set of workers whose throughput covers the rollouts a learner step consumes, over the
time that step trains. A service has no learner loop of its own, but its clients' steps are the
same two figures: the training a step runs (the service's forward-backward and optimizer seconds
since the step before: ``T_train``) and the completions its clients asked for meanwhile (the
rollouts a step needs). Each optimizer step of any client is one sample of both; the rule then
runs unchanged, every ``activation.replan_every`` steps, as it does for ``echo2 train``. How far
off-policy the clients sample is their own affair (the service does not see the cookbook's
``max_steps_off_policy``): the operator's ``staleness`` says how much of the sampling overlaps the
next steps' training (at 0, a synchronous client, every worker speeds every step up, so the rule
keeps nearly all of them; at 1 or more it parks what the clients' pace does not need).
"""

from __future__ import annotations

from dataclasses import replace

from echo2.coordinator.state import CoordinatorState
from echo2.core.smoothing import EMA_WEIGHT, ema


class ServiceDemand:
    """Feeds the coordinator's run clock and activation policy from the service's steps."""

    def __init__(self, state: CoordinatorState) -> None:
        self.state = state
        self.rows_per_step: float | None = None
        """Smoothed completions asked for per optimizer step."""
        self._rows = 0
        self._steps = 0

    def asked(self, rows: int) -> None:
        """Clients asked for ``rows`` completions."""
        with self.state.cond:
            self._rows += rows

    def stepped(self, training_s: float) -> None:
        """A client took an optimizer step after ``training_s`` seconds of training since the last one."""
        parts = self.state.parts
        with self.state.cond:
            self.rows_per_step = ema(self.rows_per_step, float(self._rows), EMA_WEIGHT)
            self._rows, self._steps = 0, self._steps + 1
            parts.fleet.policy = replace(parts.fleet.policy, rollouts_per_step=max(1, round(self.rows_per_step)))
            parts.books.clock.step_took(training_s)
            if self._steps % parts.books.clock.replan_every == 0:
                parts.replan("periodic")
