"""Fair shares of the staleness window: how many groups one lease may take (the coordinator and
the simulator both grant through here).

The window holds ``(S + 1) * B`` group slots. A worker that asks for all of them and never
delivers stalls the learner until its leases expire, and could take the window again at each
expiry (measured: 1.35 learner steps/s fell to 0 for a minute). So a lease grants at most
``groups_per_lease``; while other workers are live, one worker holds at most
:data:`LEASES_IN_HAND` leases' worth of slots (an echo2 worker's own pipeline: one lease whose
results are on the wire, one generating, one asked for ahead) and at most ``window_share`` of the
window; and a worker whose leases keep expiring unfulfilled is slowed to one group per lease,
then parked for a while that grows fourfold with each further miss: every slot a hoarder holds
is out of the window for up to ``lease_timeout_s``, so it must get few. Delivering means a group
trained (:func:`delivered`), not a submission accepted. A worker that has not delivered yet is on trial: while other workers are live, one group per lease, and parked
at its first miss (a new name costs nothing, so a hoarder that registers again and again must gain
nothing from being new); an honest newcomer pays one small first lease. Even one slot counts: in
the attack bench a hoarder holding one slot of a 16-slot window cut the learner's steps/s by about
40% while it held it (the honest workers' 4-group leases no longer fit the window twice). So
the slots of a worker on probation (:func:`on_probation`) are lent: they count against the
window only once their group arrives (:class:`echo2.core.pacing.PacingLedger`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

TRIAL_SLACK = 4.0
"""A lent lease (:func:`on_probation`) may take this multiple of the time a group is expected to take."""
TRIAL_FLOOR_S = 10.0
"""... and at least this long (a submission's upload, a slow first lease)."""

LEASES_IN_HAND = 3
"""Leases an honest worker may hold at once: the one it submits (:mod:`echo2.rollout.courier`),
the one it generates, and the one it asked for ahead (async protocol, :mod:`echo2.rollout.worker`):
asking ahead hides the lease's round trip, which on a link queueing behind weight transfers
took longer than generating a lease (docs/wan.md)."""


@dataclass(frozen=True)
class SharePolicy:
    groups_per_lease: int
    """The most groups one lease grants (``rollout.groups_per_lease``)."""
    window_share: float
    """The most of the window one worker may hold while other workers are live (``coordinator.window_share``)."""
    slow_after: int = 1
    """Consecutive unfulfilled leases after which a worker gets one group per lease."""
    park_after: int = 2
    """Consecutive unfulfilled leases after which a worker is parked for a while."""
    grows_with_delivery: bool = False
    """Leases sized to the worker's device (``rollout.groups_per_lease: device``): while others
    are live, a lease grants at most twice the groups the worker has delivered, whatever it asks."""


def lease_size(policy: SharePolicy, requested: int, held: int, window: int, others_live: bool,
               holder: Holder, untrained: int = 0, *, others_proven: bool) -> int:
    """Groups to grant ``holder`` when it asks for ``requested`` while holding ``held`` in-flight
    slots of a ``window``-slot window (0: it must wait for its own leases to finish first). A
    worker on trial or slowed holds one group at a time, from its grant until it is trained:
    ``untrained`` counts its groups submitted and not trained yet (the caller passes 0 while no
    proven worker is working, who could fill the learner's batch meanwhile:
    :meth:`echo2.core.books.Books._working`). Lent slots count
    against the window once their group arrives, so a worker on trial that got another lent group
    each time it submitted one would overrun the window, and the overrun is dropped as stale.
    ``others_proven``: whether another worker at work has delivered; probation applies only then: while nobody has, nobody could do the work in a newcomer's place
    (a run's start), and the shares alone bound what one worker holds."""
    probation = on_probation(policy, holder, others_proven)
    size = min(requested, policy.groups_per_lease)
    if probation or slowed(policy, holder):
        size = min(size, 1)
    if not others_live:
        return size
    if (held or untrained) and probation:
        return 0
    if policy.grows_with_delivery:
        # the ask is the worker's word on its memory: two identities asking for the window held
        # 63-128 slots each; doubling per lease delivered costs an honest large device a few leases
        size = min(size, max(1, 2 * holder.groups_delivered))
    share = max(1, math.ceil(policy.window_share * window))
    return max(0, min(size, share - held, LEASES_IN_HAND * policy.groups_per_lease - held))


def deadline_s(lease_timeout_s: float, lent: bool, holder: Holder, group_s: float | None) -> float:
    """Seconds a lease may be held before it expires: ``lease_timeout_s``, or, for a lent lease
    (a worker on trial or slowed), :data:`TRIAL_SLACK` times ``group_s`` (the time the slowest
    measured worker at work, or the holder itself where it is slower, takes per group; None:
    nothing measured), doubling with each lease the holder let expire in a row, between
    :data:`TRIAL_FLOOR_S` and ``lease_timeout_s``.

    Why: what one identity holds is bounded by its share of the window in slots and by the
    lease's deadline in time, and a newcomer's word on its speed is worth nothing. A swarm of new
    identities each holding its one lent group for the full minute kept those prompts from every
    honest worker for that minute; held to a few group-times, a hoarder's slot-seconds are what an
    honest slow worker would need, and an honest newcomer far slower than anyone measured earns
    the full timeout after a few misses (each parks it: :func:`missed`)."""
    if not lent or group_s is None:
        return lease_timeout_s
    return min(lease_timeout_s, max(TRIAL_FLOOR_S, TRIAL_SLACK * group_s) * 2 ** min(holder.unfulfilled, 16))


def group_seconds(group_size: int, holder_rate: float | None, measured_rates: list[float]) -> float | None:
    """Seconds per group that :func:`deadline_s` expects of a holder: at the slowest of the
    ``measured_rates`` (rollouts/s of the workers at work that have delivered) and its own
    (``holder_rate``, where measured); None when neither is known."""
    rates = [r for r in [*measured_rates, holder_rate] if r]
    return group_size / min(rates) if rates else None


def on_probation(policy: SharePolicy, holder: Holder, others_live: bool) -> bool:
    """Whether ``holder`` is held to one group a lease and one lease at a time: while other workers
    are live, one that has not delivered a lease yet (on trial) or let one expire (slowed). Its
    slots are lent (:meth:`echo2.core.pacing.PacingLedger.grant`): the others' share of the window
    does not shrink by what it holds."""
    return others_live and (not holder.proven or slowed(policy, holder))


def slowed(policy: SharePolicy, holder: Holder) -> bool:
    """``holder`` let :attr:`SharePolicy.slow_after` leases in a row expire: one group a lease until it delivers."""
    return holder.unfulfilled >= policy.slow_after


def parked_for(policy: SharePolicy, unfulfilled: int, lease_timeout_s: float, proven: bool = True) -> float:
    """Seconds a worker with ``unfulfilled`` consecutive expired leases is parked (0: not parked);
    one that never delivered (not ``proven``) is parked from its first miss."""
    park_after = policy.park_after if proven else 1
    if unfulfilled < park_after:
        return 0.0
    return lease_timeout_s * 4 ** min(unfulfilled - park_after, 5)


class Holder(Protocol):
    """A worker as the coordinator and the simulator each keep it."""

    unfulfilled: int
    parked_until: float
    proven: bool
    """It has delivered a lease (since it registered)."""
    groups_delivered: int
    """Its groups trained (since it registered)."""


def missed(policy: SharePolicy, holder: Holder, now: float, lease_timeout_s: float) -> float:
    """One more of ``holder``'s leases expired unsubmitted: count it and park the holder if it is
    time to; returns how long it is parked from ``now`` (0: not parked)."""
    holder.unfulfilled += 1
    parked_s = parked_for(policy, holder.unfulfilled, lease_timeout_s, holder.proven)
    if parked_s:
        holder.parked_until = now + parked_s
    return parked_s


def dropped_stale(policy: SharePolicy, holder: Holder, others_proven: bool, now: float,
                  lease_timeout_s: float) -> float:
    """A group of ``holder``'s was dropped as too old to train: for a worker on probation
    (:func:`on_probation`: on trial or slowed while ``others_proven``, another worker at work has
    delivered), a miss (:func:`missed`; returns how long it is parked from ``now``); else nothing.

    Why: delivery counts at training, so a dropped group earns nothing, but without this it cost
    nothing either. A hoarder holding its one lent group until the learner had moved S + 2 versions
    on and then submitting junk was accepted, never audited (the group was dropped before any
    draw) and lent its next group at once, round after round."""
    if not on_probation(policy, holder, others_proven):
        return 0.0
    return missed(policy, holder, now, lease_timeout_s)


def delivered(holder: Holder) -> None:
    """A group of ``holder``'s was trained: whatever it missed before is forgiven, and it is proven.
    Not on a submission's acceptance: a hoarder that held its lease until the learner had moved
    S + 2 versions on, then submitted junk, was accepted, forgiven and proven again, its group
    dropped as stale before any audit, and held a full lease next; and a swarm of fabricating
    identities, each proven by its first submission, held full leases until their audits came
    (the learner made no step for ~115 s). A trained group passed every audit it was drawn for,
    and a worker on probation has all its groups audited. Until then a newcomer stays on trial: one
    lent group a lease."""
    holder.unfulfilled, holder.parked_until, holder.proven = 0, 0.0, True
    holder.groups_delivered += 1

