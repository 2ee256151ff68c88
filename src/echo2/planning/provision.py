"""The provisioning rule applied to an inventory: which workers to run, at what cost, how busy.

Combines the capacity model (:mod:`echo2.planning.capacity`), the dissemination estimate
(:mod:`echo2.planning.broadcast_time`) and the min-cost activation (:mod:`echo2.planning.activation`).
The broadcast time depends on how many workers receive each version, and that count depends on
the requirement, so the two are iterated to a fixed point (a few rounds; the chosen set only
shrinks or stays).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from echo2.planning.activation import Candidate, choose_active
from echo2.planning.broadcast_time import arrival_seconds, broadcast_seconds, staggered_broadcast_s
from echo2.planning.capacity import (
    StepTimes,
    max_utilization,
    predicted_utilization,
    provisioning_need,
    required_throughput,
)
from echo2.planning.inventory import Inventory
from echo2.units import MIB


@dataclass(frozen=True)
class Provision:
    staleness: int
    chosen: dict[str, int]
    """Workers to run per class."""
    throughput: float
    """Their summed effective rollouts/s."""
    required: float
    """Throughput the target utilization needs (inf: no fleet reaches it at this S)."""
    asked: float
    """Throughput the rule asked for: ``required``, or the knee's when the inventory cannot reach
    the target (:func:`echo2.planning.capacity.provisioning_need`)."""
    ceiling: float
    """Utilization with unlimited throughput (dissemination-bound below 1)."""
    broadcast_s: float
    utilization: float
    """Predicted learner utilization with the chosen set."""
    price_per_hour: float
    """Workers plus learner, dollars per hour."""
    step_s: float
    """Predicted seconds per learner step."""

    @property
    def cost_per_step(self) -> float:
        return self.price_per_hour * self.step_s / 3600


def provision(inventory: Inventory, rollouts_per_step: int, staleness: int, mode: str = "pipelined",
              chunk_mib: float = 1.0, target_utilization: float = 1.0, reachable_share: float = 0.95,
              activate: bool = True) -> Provision:
    """Cheapest worker set that keeps the learner at ``target_utilization``; when no set can, the
    cheapest reaching ``reachable_share`` of the best any fleet could (or everything, if none can).
    ``activate=False`` (cost-aware activation off): every worker runs."""
    learner = inventory.learner
    candidates, uploads = [], {}
    for worker_class in inventory.workers:
        for index in range(worker_class.count):
            name = f"{worker_class.name}#{index}"
            candidates.append(Candidate(name, worker_class.price_per_hour, inventory.throughput(worker_class)))
            uploads[name] = worker_class.upload_bytes_per_s
    payload, learner_upload = learner.payload_mib * MIB, learner.upload_bytes_per_s
    active, available = candidates, sum(c.throughput for c in candidates)
    for _ in range(5 if activate else 0):
        bcast = learner.fixed_broadcast_s + broadcast_seconds(payload, learner_upload, [uploads[c.name] for c in active], mode, chunk_mib * MIB)
        times = StepTimes(learner.train_step_s, bcast, rollouts_per_step, staleness)
        need = provisioning_need(times, available, target_utilization, reachable_share=reachable_share)
        chosen = choose_active(candidates, need)
        names = set(chosen.active)
        picked = [c for c in candidates if c.name in names]
        if picked == active:
            break
        active = picked
    arrivals = arrival_seconds(payload, learner_upload, [uploads[c.name] for c in active], mode, chunk_mib * MIB)
    bcast = learner.fixed_broadcast_s + max(arrivals, default=0.0)
    if staleness == 0 and active:  # sync: each worker starts the batch on its own copy's arrival
        bcast = learner.fixed_broadcast_s + staggered_broadcast_s(arrivals, [c.throughput for c in active],
                                                                  rollouts_per_step)
    copies = max(len(active), 1) if mode == "star" else 1
    times = StepTimes(learner.train_step_s, bcast, rollouts_per_step, staleness, payload / learner_upload, copies)
    throughput = sum(c.throughput for c in active)
    utilization = predicted_utilization(times, throughput)
    return Provision(
        staleness=staleness,
        chosen=dict(Counter(c.name.split("#")[0] for c in active)),
        throughput=throughput,
        required=required_throughput(times, target_utilization),
        asked=provisioning_need(times, available, target_utilization, reachable_share=reachable_share),
        ceiling=max_utilization(times),
        broadcast_s=bcast,
        utilization=utilization,
        price_per_hour=learner.price_per_hour + sum(c.price_per_hour for c in active),
        step_s=learner.train_step_s / utilization if utilization > 0 else float("inf"),
    )


def centralized_cost_per_step(inventory: Inventory, rollouts_per_step: int) -> float | None:
    """The counterfactual: the learner's own hardware generates the rollouts, then trains, serially."""
    learner = inventory.learner
    if learner.generation_rollouts_per_s is None:
        return None
    step_s = learner.train_step_s + rollouts_per_step / learner.generation_rollouts_per_s
    return learner.price_per_hour * step_s / 3600
