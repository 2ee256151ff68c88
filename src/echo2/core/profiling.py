"""Profiling for cost-aware activation: a worker's throughput, measured over its whole lease cycle.

Each submitted lease gives a worker's throughput over its lease cycle (:class:`LeaseCycle`: from
its previous submission, so swapping a version in, slow links, throttling and contention all
count; the coordinator's holds and waits for a version do not), smoothed as seconds per rollout
(:func:`profile`). The coordinator and the simulator both profile here; the rule that reads the
figure is :mod:`echo2.planning.activation_rule`.
"""

from __future__ import annotations

from dataclasses import dataclass

from echo2.core.smoothing import ema

#: Weight of the newest lease in a worker's throughput average.
PROFILE_WEIGHT = 0.3


def profile(previous: float | None, rollouts: int, wall_s: float) -> float | None:
    """A worker's throughput average after a lease of ``rollouts`` that took ``wall_s``.

    Averaged as seconds per rollout, not rollouts per second: cycles differ (one swaps a new
    version in, the next does not; generation times spread), and a mean of rates over-states the
    rate that sums of rollouts over sums of seconds give, which is what the fleet delivers."""
    if wall_s <= 0 or rollouts <= 0:
        return previous
    seconds = ema(None if previous is None else 1 / previous, wall_s / rollouts, PROFILE_WEIGHT)
    return 1 / seconds


def busy_seconds(now: float, granted_at: float, cycle_began_at: float | None) -> float:
    """How long a lease submitted ``now`` kept its worker, for :func:`profile`: its whole cycle
    (:class:`LeaseCycle`), from the grant for a worker's first lease.

    The cycle, not grant to submit: between two leases a worker swaps the version it fetched into
    its engine and asks again, and the fluid model's ``R / sum(mu)`` has no other place for that
    time. Measured from the grant, the 30B scenario's workers (30 s to load 61 GB, steps of about
    100 s, 24% of their active time between leases) were profiled faster than they delivered, and
    the fleet chosen to cover the requirement kept the learner busy 82% of the time. A lease asked
    for ahead is granted while the one before is generated: its cycle begins at that one's
    submission all the same."""
    return now - (granted_at if cycle_began_at is None else cycle_began_at)


@dataclass
class LeaseCycle:
    """Where a worker's current lease cycle began, for :func:`busy_seconds`: at its latest
    submission, or later where it was sent away for what is not its own generation's doing.

    An answer ``wait`` or ``parked`` (the coordinator holds the request: a full window, parking)
    or ``refresh`` (its weights are too old: it waits for a version, which the fluid model counts
    in ``T_bcast``) pauses the cycle; the grant that ends the pause begins it again. Counting the
    wait for a version as generation time profiled the 1000-worker scenario's workers (44% of
    their active time waiting for staged versions) at under half their rate and ran a third more
    of them than the fleet needed."""

    began_at: float | None = None
    """None before the first submission."""
    paused: bool = False

    def answered(self, status: str, now: float) -> None:
        """A lease request of the worker was answered ``status`` at ``now``."""
        if status in ("wait", "parked", "refresh"):
            self.paused = True
        elif status == "granted" and self.paused:
            self.paused = False
            if self.began_at is not None:
                self.began_at = now

    def submitted(self, now: float, granted_at: float, rollouts: int, throughput: float | None) -> float | None:
        """A lease of ``rollouts`` granted at ``granted_at`` was submitted ``now``: the worker's
        ``throughput`` with this cycle folded in (:func:`profile` over :func:`busy_seconds`, the one
        step the coordinator and the simulator both take); the next cycle begins now."""
        busy_s = busy_seconds(now, granted_at, self.began_at)
        self.began_at = now
        return profile(throughput, rollouts, busy_s)
