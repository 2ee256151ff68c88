"""The run's reliability report: what happened to every prompt drawn, every lease and every group.

``prompts_unaccounted`` closes the books: every prompt drawn from the task's stream is trained
on, filtered out, buffered, re-queued or in flight; anything else would be a lost prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from echo2.coordinator.books import CoordinatorBooks


def reliability_report(state: CoordinatorBooks) -> dict[str, int | dict[str, int]]:
    """The report of ``state`` (call under its lock)."""
    counters, ledger = state.books.counters, state.books.ledger
    accounted = counters.groups_trained + counters.groups_filtered + len(ledger) + len(ledger.requeued) + len(ledger.in_flight)
    return {
        "prompts_drawn": state.examples.drawn,
        "prompts_unaccounted": state.examples.drawn - accounted,
        "groups_trained": counters.groups_trained,
        "groups_trained_twice": counters.groups_trained_twice,
        "leases_issued": counters.leases_issued,
        "leases_completed": counters.leases_completed,
        "leases_expired": counters.leases_expired,
        "leases_failed": counters.leases_failed,
        "requests_poisoned": counters.requests_poisoned,
        "leases_outstanding": len(state.books.active_leases()),
        "prompts_requeued": ledger.requeued_total,
        "groups_accepted": counters.groups_accepted,
        "groups_rejected": dict(state.books.rejected),
        "duplicate_submissions": counters.duplicate_submissions,
        "groups_dropped_stale": ledger.dropped_stale,
        "groups_discarded_quarantined": counters.groups_discarded_quarantined,
        "groups_discarded_unauditable": counters.groups_discarded_unauditable,
        "groups_filtered_degenerate": counters.groups_filtered,
        "groups_buffered": len(ledger),
        "workers_registered": counters.workers_registered,
        "workers_dead": counters.workers_dead,
        "workers_left": counters.workers_left,
        "workers_quarantined": counters.workers_quarantined,
        "workers_reactivated": state.fleet.billing.reactivations(),
        "registrations_refused_trial": counters.registrations_refused_trial,
        "requests_rate_limited": sum(r.rate_limited for r in state.registry.records()),
        "timeline_events_dropped": sum(r.events_dropped for r in state.registry.records()),
        "learner_restarts": counters.learner_restarts,
        "leases_lost_in_restart": counters.leases_lost_in_restart,
        **{name: source.report() for name, source in state.sources.items()},
    }
