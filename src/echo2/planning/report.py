"""``echo2 plan``: the provisioning decision for a config and an inventory, as a table."""

from __future__ import annotations

from echo2.config import Config
from echo2.planning.inventory import Inventory
from echo2.planning.provision import Provision, centralized_cost_per_step, provision


def plan_lines(config: Config, inventory: Inventory, other_staleness: range = range(0, 5),
               centralized: bool = True) -> list[str]:
    """``centralized``: print the inventory's flat counterfactual (``learner.generation_rollouts_per_s``);
    ``echo2 plan --scenario`` prints the engine-timed baseline instead."""
    rollouts = config.learner.groups_per_step * config.rollout.group_size
    mode, chunk = config.broadcast.mode, config.broadcast.chunk_mib

    rule = config.activation

    def run(s: int) -> Provision:
        return provision(inventory, rollouts, s, mode, chunk, rule.target_utilization, rule.reachable_share,
                         activate=rule.enabled)

    chosen = run(config.staleness)
    lines = [f"plan for S={chosen.staleness}, {rollouts} rollouts per step, {mode} broadcast, "
             f"T_train {inventory.learner.train_step_s:g}s, payload {inventory.learner.payload_mib:g} MiB"
             + ("" if rule.enabled else " (cost-aware activation off: every worker runs)"),
             "", f"{'worker class':<24}{'run':>5}{'of':>5}{'$/h each':>10}{'rollouts/s each':>17}"]
    for worker_class in inventory.workers:
        lines.append(f"{worker_class.name:<24}{chosen.chosen.get(worker_class.name, 0):>5}{worker_class.count:>5}"
                     f"{worker_class.price_per_hour:>10.3f}{inventory.throughput(worker_class):>17.1f}")
    lines += ["", f"throughput {chosen.throughput:.1f} rollouts/s ({_requirement(chosen)}); "
                  f"dissemination {chosen.broadcast_s:.2f}s",
              f"predicted learner utilization {100 * chosen.utilization:.1f}%, {chosen.step_s:.2f}s per step",
              f"cost ${chosen.price_per_hour:.2f}/h (learner included), ${chosen.cost_per_step:.4f} per learner step"]
    counterfactual = centralized_cost_per_step(inventory, rollouts) if centralized else None
    if counterfactual is not None:
        lines.append(f"centralized counterfactual (learner hardware generates too): ${counterfactual:.4f} per step "
                     f"({counterfactual / chosen.cost_per_step:.2f}x)")
    lines += ["", f"{'S':>3}{'workers':>9}{'utilization':>13}{'s/step':>9}{'$/h':>9}{'$/step':>10}"]
    for s in other_staleness:
        other = run(s)
        lines.append(f"{s:>3}{sum(other.chosen.values()):>9}{100 * other.utilization:>12.1f}%{other.step_s:>9.2f}"
                     f"{other.price_per_hour:>9.2f}{other.cost_per_step:>10.4f}")
    return lines


def _requirement(plan: Provision) -> str:
    """What the rule asked for, and why, in words."""
    if plan.asked == plan.required:
        return f"rule asks {plan.required:.1f}"
    reach = "out of reach at this S" if plan.required == float("inf") else "beyond the inventory"
    verdict = ", more than the inventory has: all run" if plan.asked > plan.throughput else ""
    return (f"the target is {reach}, the best any fleet reaches is {100 * plan.ceiling:.1f}%; "
            f"rule asks {plan.asked:.1f} for the knee{verdict}")
