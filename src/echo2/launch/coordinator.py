"""The coordinator assembled once, for every kind of run: ``echo2 train`` (a task's prompts, or an
agent's episodes) and ``echo2 serve`` (a training service's clients' requests).

Every setting is the config's; what differs between runs is only the work: what the staleness
window paces (:class:`~echo2.coordinator.books.Training`, none for a service), whether the task's
prompts are leased and scored (:class:`~echo2.coordinator.scoring.TaskPrompts`), handed over
whole when the coordinator is built, and the other kinds of work (:mod:`echo2.coordinator.sources`),
each added by the part that owns it once built over the coordinator (prime-rl's orchestrator
builds its components, then wires them; nothing writes another's fields).
"""

from __future__ import annotations

from echo2.broadcast.topology import Planner
from echo2.config import Config
from echo2.coordinator.books import Interval, Training
from echo2.coordinator.fleet import Fleet
from echo2.coordinator.membership import TRIAL_SEATS
from echo2.coordinator.records import Limits
from echo2.coordinator.scoring import TaskPrompts
from echo2.coordinator.state import CoordinatorState
from echo2.planning.activation_rule import ActivationPolicy
from echo2.protocol import RunSpec


def build_coordinator(config: Config, spec: RunSpec, limits: Limits, *, run_token: str, planner: Planner,
                      training: Training | None, prompts: TaskPrompts | None = None,
                      on_interval: Interval | None = None) -> CoordinatorState:
    """The run's coordinator over ``config``'s settings, telling workers ``spec``, checking their
    submissions against ``limits``, its versions relayed as ``planner`` plans and its timeline
    written by ``on_interval``. Activation provisions for a learner step's rollouts where there is
    a step (``training``); a service's fleet, with no step, for one rollout at a time."""
    rollouts_per_step = training.groups_per_step * config.rollout.group_size if training is not None else 1
    coordinator = config.coordinator
    return CoordinatorState(
        spec, limits, training=training, prompts=prompts, run_token=run_token, planner=planner,
        lease_timeout_s=coordinator.lease_timeout_s, heartbeat_timeout_s=coordinator.heartbeat_timeout_s,
        window_share=coordinator.window_share, trial_seats=max(TRIAL_SEATS, config.workers.count),
        check_relays=True, replan_every=config.activation.replan_every,
        fleet=Fleet(ActivationPolicy.from_rule(config.activation, rollouts_per_step, config.staleness)),
        **({"on_interval": on_interval} if on_interval is not None else {}))
