"""What ``echo2 train`` reports when a run ends: accuracy before and after, throughput, the
answers' format, the books of leases and groups, the cost (and the same as data for benches)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from echo2.learner.loop import LoopResult


@dataclass
class RunSummary:
    run_dir: Path
    result: LoopResult
    accuracy_before: float
    accuracy_after: float
    sampled_reward_before: float | None
    sampled_reward_after: float | None
    """None when the run's evaluations played no temperature episodes (``eval.sampled: false``)."""
    groups_dropped: int
    workers_registered: int
    costs: dict[str, float]
    reliability: dict

    def lines(self) -> list[str]:
        r, agent = self.result, "agent" in self.reliability
        by_class = ", ".join(f"{k[5:-4]} ${v:.4f}" for k, v in sorted(self.costs.items()) if k.startswith("cost/"))
        return [
            f"run directory: {self.run_dir}",
            f"held-out accuracy {100 * self.accuracy_before:.1f}% -> {100 * self.accuracy_after:.1f}% "
            f"({'episodes the agent played through the fleet, solved at agent.success_reward' if agent else 'greedy exact match'}"
            f"; after = mean of the last {min(3, len(r.evals) - 1)} evals)",
            *([f"sampled reward {100 * self.sampled_reward_before:.1f}% -> {100 * self.sampled_reward_after:.1f}% "
               "(temperature samples on held-out prompts)"]
              if self.sampled_reward_before is not None and self.sampled_reward_after is not None else []),
            f"{r.steps} steps in {r.wall_seconds:.0f}s | {self.throughput()} end to end | learner utilization "
            f"{r.utilization:.0%} | groups dropped as stale: {self.groups_dropped}",
            *self.format_lines(),
            self.reliability_line(),
            *([self.agent_line()] if agent else []),
            *([f"stopped by a signal after step {r.steps}: checkpointed; continue with echo2 train --resume "
               f"{self.run_dir}"] if r.interrupted else []),
            *([f"stopped after step {r.steps}, starved of data: {r.starved}; checkpointed (reliability.json "
               f"says where the groups went); continue with echo2 train --resume {self.run_dir}"] if r.starved else []),
        ] + ([] if not self.costs["cost_centralized_usd"] else [
            f"cost ${self.costs['cost_usd']:.4f} (${self.costs['cost_usd'] / max(r.steps, 1):.5f} per step; "
            f"workers: {by_class or 'none'}; learner ${self.costs['cost_learner_usd']:.4f}) | centralized "
            f"counterfactual ${self.costs['cost_centralized_usd']:.4f}",
        ])

    def format_lines(self) -> list[str]:
        """Format share, accuracy among well-formed answers and length, first eval vs the last 3:
        what separates learning the answer from learning the format (tasks that ask for one)."""
        first, last = self.result.evals[0][1], [e for _, e in self.result.evals[1:]][-3:]
        if not last or (first.well_formed == 1.0 and all(e.well_formed == 1.0 for e in last)):
            return []

        def percent(values: list[float | None]) -> str:
            known = [v for v in values if v is not None]
            return f"{100 * sum(known) / len(known):.1f}%" if known else "- (none well-formed)"

        return [f"well-formed answers {percent([first.well_formed])} -> {percent([e.well_formed for e in last])} | "
                f"accuracy among well-formed {percent([first.well_formed_accuracy])} -> "
                f"{percent([e.well_formed_accuracy for e in last])} | greedy length {first.greedy_tokens:.1f} -> "
                f"{sum(e.greedy_tokens for e in last) / len(last):.1f} tokens"]

    def reliability_line(self) -> str:
        r = self.reliability
        rejected = sum(r["groups_rejected"].values())
        return (f"reliability: leases {r['leases_issued']} issued / {r['leases_completed']} completed / "
                f"{r['leases_expired']} expired ({r['prompts_requeued']} prompts re-queued) | groups "
                f"{r['groups_accepted']} accepted / {rejected} rejected {r['groups_rejected'] or ''} / "
                f"{r['duplicate_submissions']} duplicate / {r['groups_dropped_stale']} stale / "
                f"{r['groups_discarded_quarantined']} from quarantined workers | workers {r['workers_dead']} dead, "
                f"{r['workers_left']} left, {r['workers_quarantined']} quarantined")

    def throughput(self) -> str:
        """The fleet's work per second in its own units: a task's samples, an agent run's episodes,
        calls and completion tokens (its groups are played call by call, not sampled as samples)."""
        seconds = max(self.result.wall_seconds, 1e-9)
        if "agent" not in self.reliability:
            return f"{self.result.samples / seconds:.0f} samples/s"
        a = self.reliability["agent"]
        return (f"{a.get('episodes_rewarded', 0) / seconds:.2f} episodes/s, {a.get('calls', 0) / seconds:.1f} calls/s, "
                f"{a.get('tokens_sampled', 0) / seconds:.0f} tokens/s")

    def agent_line(self) -> str:
        """An agent run's episodes: how many ended how, and what of their calls was trained."""
        a = self.reliability["agent"]
        return (f"agent episodes: {a.get('episodes_rewarded', 0)} rewarded / {a.get('episodes_dropped', 0)} dropped "
                f"({a.get('groups_dropped', 0)} groups dropped) | {a.get('calls', 0)} calls, "
                f"{a.get('calls_abandoned', 0)} retried (not trained) | {a.get('groups_admitted', 0)} groups, "
                f"{a.get('segments_trained', 0)} segments to train")
