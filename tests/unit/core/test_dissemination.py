"""When a version has reached the fleet (``core/dissemination.py``): the one rule behind the
dissemination figure, read by the coordinator's version book and by the simulator alike."""

import pytest
from simulation_support import scenario

from echo2.core.books import Books
from echo2.core.dissemination import DisseminationCensus, Reached
from echo2.core.shares import SharePolicy
from echo2.simulation.engine import simulate


def test_a_version_reaches_the_fleet_when_its_last_counted_worker_holds_it_or_a_newer_one():
    census = DisseminationCensus()
    census.publish(1, at=10.0)
    census.loaded(1)
    census.hold("b", 0, at=9.0)  # a worker counts from its first load on
    assert census.hold("a", 1, at=12.0) == []  # b still on 0
    assert census.spreading()
    assert census.hold("b", 1, at=13.0) == [Reached(1, 10.0, 13.0)]
    assert not census.spreading()
    assert census.hold("b", 1, at=14.0) == []  # reported once


def test_a_worker_that_skips_a_version_counts_by_the_newer_one_and_a_skipped_version_goes_unmeasured():
    census = DisseminationCensus()
    for version, at in ((1, 10.0), (2, 20.0), (3, 30.0)):
        census.publish(version, at)
    for worker in "ab":
        census.hold(worker, 0, at=0.0)
    census.loaded(1)
    census.loaded(3)
    assert census.hold("a", 1, at=11.0) == []
    assert census.hold("a", 3, at=31.0) == []
    # b goes from 0 straight to 3: version 1 reached the fleet then; 2 nobody loaded itself
    assert census.hold("b", 3, at=33.0) == [Reached(1, 10.0, 33.0), Reached(3, 30.0, 33.0)]


def test_a_worker_that_dies_is_no_longer_waited_for():
    census = DisseminationCensus()
    census.publish(1, at=10.0)
    census.loaded(1)
    census.hold("b", 0, at=0.0)
    census.hold("a", 1, at=11.0)
    assert census.hold("b", None, at=15.0) == [Reached(1, 10.0, 15.0)]
    assert census.hold("b", None, at=16.0) == []


def test_each_worker_is_timed_by_the_age_of_each_version_it_gets_and_keeps_its_time_while_out():
    census = DisseminationCensus()
    for version, at in ((1, 10.0), (2, 20.0), (3, 30.0)):
        census.publish(version, at)
    census.hold("a", 0, at=0.0)  # a first load: no spread to time
    census.hold("b", 2, at=25.0)  # joined at version 2: nothing timed either
    assert census.arrival_s == {}
    census.hold("a", 1, at=14.0)
    assert census.arrival_s == {"a": 4.0}
    census.hold("a", 3, at=35.0)  # from 1 straight to 3: the age of the version it got, smoothed (EMA weight 0.2)
    assert census.arrival_s["a"] == pytest.approx(0.8 * 4.0 + 0.2 * 5.0)
    census.hold("b", 3, at=31.0)
    assert census.arrival_s["b"] == 1.0
    census.hold("b", None, at=40.0)  # parked or dead: out of the count, its time kept for the choice
    census.hold("b", 3, at=41.0)  # back: a first load again, not a spread
    assert census.arrival_s["b"] == 1.0


def test_a_worker_claiming_it_held_a_version_before_its_publish_is_timed_at_zero_not_less():
    # fetch times come from the worker's own report (the coordinator refuses NaN, infinities and times
    # beyond its clock-skew bound); within the bound a too-early claim can make the worker look near,
    # never nearer than holding the version at its publish
    census = DisseminationCensus()
    census.publish(1, at=100.0)
    census.hold("liar", 0, at=0.0)
    census.hold("liar", 1, at=40.0)
    assert census.arrival_s["liar"] == 0.0


def test_events_reported_out_of_order_time_a_version_by_its_last_holder():
    """Remote workers report in batches: a's load at 12 reported after b's at 14 still times
    version 1 at 14, the moment the last worker held it."""
    census = DisseminationCensus()
    census.publish(1, at=10.0)
    census.loaded(1)
    census.hold("a", 0, at=0.0)
    census.hold("b", 1, at=14.0)
    assert census.hold("a", 1, at=12.0) == [Reached(1, 10.0, 14.0)]


class Worker:
    """A worker as the books' census reads it."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id, self.at_work = worker_id, True


def _books() -> tuple[Books, dict[str, Worker]]:
    """The coordinator's census: the run's books (:meth:`echo2.core.books.Books.hold`), version 1 published at 10 s."""
    workers = {name: Worker(name) for name in ("a", "b")}
    books = Books(workers, lambda group: group, staleness=1, groups_per_step=2, group_size=2,
                  shares=SharePolicy(groups_per_lease=2, window_share=0.5), lease_timeout_s=10, replan_every=1)
    books.published(1, now=10.0, at=10.0)
    return books, workers


def test_the_coordinators_books_time_a_version_from_publish_to_its_last_live_holder():
    books, workers = _books()
    books.hold(workers["b"], 0, at=9.0)
    books.hold(workers["a"], 1, at=12.0)
    books.hold(workers["a"], 0, at=9.0)  # an older load reported late moves nothing back
    assert books.time_dissemination() == [] and books.census.spreading()
    [reached] = books.hold(workers["b"], 1, at=13.0)
    assert reached.version == 1 and reached.reached - reached.published == 3.0
    assert not books.census.spreading() and books.time_dissemination() == [3.0]


def test_the_books_stop_waiting_for_a_worker_gone():
    books, workers = _books()
    books.hold(workers["b"], 0, at=0.0)
    assert books.hold(workers["a"], 1, at=11.0) == []
    workers["b"].at_work = False  # died, left, parked or quarantined
    [reached] = books.hold(workers["b"], 0, at=14.0)
    assert reached.reached - reached.published == 4.0


def test_a_wrong_rule_in_the_census_changes_the_coordinators_figure_and_the_simulated_one(monkeypatch):
    """A census that calls a version spread once its first worker holds it (max for min)."""
    def coordinator_latency() -> float:
        books, workers = _books()
        books.hold(workers["b"], 0, at=0.0)
        reached = books.hold(workers["a"], 1, at=10.5) + books.hold(workers["b"], 1, at=13.0)
        return reached[0].reached - reached[0].published

    def simulated_latency() -> float:
        fleet = [{"name": "fast", "count": 1, "rollouts_per_s": 320.0, "fetch_delay_s": 0.05},
                 {"name": "slow", "count": 1, "rollouts_per_s": 320.0, "fetch_delay_s": 0.5}]
        return simulate(scenario(recipe__run__steps=10, fleet=fleet)).summary()["dissemination_mean_s"]

    right_live, right_sim = coordinator_latency(), simulated_latency()
    assert right_live == 3.0 and right_sim >= 0.5
    monkeypatch.setattr(DisseminationCensus, "fleet_version",
                        lambda self: max(self.holding.values()) if self.holding else self.newest)
    assert coordinator_latency() == 0.5
    assert simulated_latency() < 0.3
