"""Adds up the loss terms of a learner step's micro-batches into the step's metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from echo2.learner.objectives import LossTerms, RatioStats

IMPLAUSIBLE = "behaviour log-probs implausible under the policy (a log-ratio beyond 20 nats)"
NONFINITE = "its group was in an optimizer update whose gradient was not finite (the update was refused)"


@dataclass
class Tally:
    stats: RatioStats = field(default_factory=RatioStats)
    loss: float = 0.0
    kl_sum: float = 0.0
    entropy_sum: float = 0.0
    echoclip_loss: float = 0.0
    grad_norms: list[float] = field(default_factory=list)
    entropies: bool = False
    """Report the mean token entropy (computed only with an entropy bonus)."""
    echoclip: bool = False
    """Report the EchoClip auxiliary loss."""
    suspects: dict[int, str] = field(default_factory=dict)
    """Rows left out of the step, and why: implausible behaviour log-probs, or a refused update."""
    refused_updates: int = 0
    """Optimizer updates not applied because the gradient was not finite."""

    def add(self, terms: LossTerms) -> None:
        self.stats.merge(terms.stats)
        loss = terms.loss.item()
        self.loss += loss if math.isfinite(loss) else 0.0  # such an update is refused (see suspects)
        self.kl_sum += terms.kl_sum
        self.entropy_sum += terms.entropy_sum
        self.echoclip_loss += terms.echoclip_loss

    def absorb(self, other: Tally) -> None:
        """Add another rank's terms of the same updates (the gradient norms are already global)."""
        self.stats.merge(other.stats)
        self.loss += other.loss
        self.kl_sum += other.kl_sum
        self.entropy_sum += other.entropy_sum
        self.echoclip_loss += other.echoclip_loss
        self.suspects.update(other.suspects)

    def metrics(self, updates: int) -> dict[str, float]:
        """Per-token means over every trained token, losses per optimizer update (of ``updates``).

        Ratios: the clipped ratio (pi_theta / pi_behav, or pi_theta / pi_prox when decoupled; GSPO:
        its sequence ratio at each token). Behaviour weight: pi_theta / pi_behav (truncated
        correction) or pi_prox / pi_behav (decoupled); truncated fraction: share above the cap.
        """
        s, trained = self.stats, self.stats.tokens > 0
        tokens = max(s.tokens, 1.0)
        values = {
            "loss": self.loss / updates,
            "ratio_mean": s.ratio_sum / tokens if trained else 1.0,
            "ratio_max": s.ratio_max if trained else 1.0,
            "ratio_min": s.ratio_min if trained else 1.0,
            "clip_fraction": s.clipped / tokens,
            "behaviour_weight_mean": s.weight_sum / tokens if trained else 1.0,
            "behaviour_weight_max": s.weight_max if trained else 1.0,
            "behaviour_weight_truncated_fraction": s.truncated / tokens,
            "kl": self.kl_sum / tokens,
            "grad_norm": sum(self.grad_norms) / len(self.grad_norms) if self.grad_norms else 0.0,
            "implausible_rows": float(sum(why == IMPLAUSIBLE for why in self.suspects.values())),
            "refused_updates": float(self.refused_updates),
        }
        if self.entropies:
            values["entropy"] = self.entropy_sum / tokens
        if self.echoclip:
            values["echoclip_loss"] = self.echoclip_loss / updates
        return values
