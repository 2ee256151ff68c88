"""The pacing ledger: its rules on their own, and the live coordinator and the simulator deciding alike."""

import random

import pytest
from simulation_support import scenario
from state_support import make_state, publish, submit_all

from echo2.core.pacing import PacingLedger
from echo2.simulation.engine import Simulation


def ledger(staleness=1, groups_per_step=2) -> PacingLedger:
    return PacingLedger(staleness, groups_per_step)


def draws():
    counter = iter(range(10**6))
    return lambda: next(counter)


def test_the_window_closes_at_s_plus_v_plus_1_steps_and_a_stale_worker_is_told_to_refresh():
    book, draw = ledger(staleness=1, groups_per_step=2), draws()
    assert list(book.grant(0, 10, draw)) == [0, 1, 2, 3]  # (S + v + 1) * B = 4 slots at v = 0
    assert book.grantable(0) == "wait"
    book.version = 2
    assert book.grantable(0) == "refresh"  # slot 4 is for step 2: version 0 would be 2 > S behind
    assert book.grantable(1) == "granted"


def test_take_hands_out_the_oldest_fresh_groups_and_drops_the_stale_ones_back_into_the_queue():
    book, draw = ledger(staleness=1, groups_per_step=2), draws()
    prompts = book.grant(0, 4, draw)
    for slot, version in zip(prompts, [0, 0, 0, 0]):
        book.admit(slot, version, f"g{slot}")
    assert book.take(0, 2) == ["g0", "g1"]
    assert book.take(2, 2) is None  # version 0 is stale for step 2
    assert book.dropped_stale == 2 and list(book.requeued) == [2, 3] and book.useful_slots == 2
    assert book.grant(1, 1, draw) == {4: 2}  # the re-queued prompt goes out first


def test_a_released_lease_goes_to_the_front_and_its_slots_stop_counting():
    book, draw = ledger(staleness=0, groups_per_step=2), draws()
    first, second = book.grant(0, 1, draw), book.grant(0, 1, draw)
    book.release([*second], front=False)
    book.release([*first], front=True)
    assert list(book.requeued) == [first[0], second[1]] and book.useful_slots == 0 and not book.in_flight


def test_discarded_groups_free_their_slots_and_are_requeued_only_when_asked():
    book, draw = ledger(staleness=0, groups_per_step=2), draws()
    slots = book.grant(0, 2, draw)
    for slot in slots:
        book.admit(slot, 0, slot)
    taken = book.take(0, 2)
    book.discard_taken([slots[taken[0]]], requeue=False)  # filtered: used up
    book.discard_taken([slots[taken[1]]], requeue=True)  # quarantined: asked again
    assert book.useful_slots == 0 and list(book.requeued) == [slots[taken[1]]]


def test_evict_removes_one_workers_groups_and_keeps_the_order_of_the_rest():
    book, draw = ledger(staleness=2, groups_per_step=3), draws()
    slots = list(book.grant(0, 6, draw))
    for slot in slots:
        book.admit(slot, 0, ("bad" if slot % 2 else "good", slot))
    evicted = book.evict(lambda group: group[0] == "bad")
    assert sorted(g[1] for g in evicted) == [1, 3, 5] and list(book.requeued) == [1, 3, 5]
    assert book.take(0, 3) == [("good", 0), ("good", 2), ("good", 4)]


def test_a_lent_slot_counts_against_the_window_only_once_its_group_arrives():
    book, draw = ledger(staleness=0, groups_per_step=2), draws()  # a window of 2 slots at version 0
    lent = book.grant(0, 1, draw, lent=True)
    assert book.useful_slots == 0 and list(book.grant(0, 2, draw)) == [1, 2]  # the others' room is whole
    book.release(lent)  # expired: its prompt is asked again, and nothing else is uncounted
    assert book.useful_slots == 2 and list(book.requeued) == [0] and not book.lent
    again = book.grant(0, 1, draw, lent=True) if book.grantable(0) == "granted" else {}
    assert again == {} and book.grantable(0) == "wait"  # a lent slot is granted only inside the window
    book.version = 1
    delivered = book.grant(1, 1, draw, lent=True)
    book.admit(*delivered, 1, "g")
    assert book.useful_slots == 3 and not book.lent  # arrived: it counts from now on


def test_a_snapshot_requeues_what_was_in_flight_and_restores_the_rest():
    book, draw = ledger(staleness=1, groups_per_step=2), draws()
    slots = [*book.grant(0, 3, draw), *book.grant(0, 1, draw, lent=True)]
    book.admit(slots[0], 0, "g0")
    restored = ledger(staleness=1, groups_per_step=2)
    restored.restore(book.snapshot(lambda p: p, lambda g: g), lambda p: p, lambda g: g)
    assert list(restored.requeued) == [1, 2, 3] and restored.useful_slots == 1 and restored.next_slot == 4
    assert restored.take(0, 1) == ["g0"]


class Oracle:
    """The pacing rules written out from their definitions (ECHO-2's bounded staleness; see
    :mod:`echo2.core.staleness`) with no code of echo2's: the reference both sides must match, so that a
    wrong rule in the shared ledger fails as surely as a wrong use of it."""

    def __init__(self, staleness: int, groups_per_step: int) -> None:
        self.s, self.b = staleness, groups_per_step
        self.version = self.useful = self.next_slot = 0
        self.buffer: list[tuple[int, int]] = []  # (version, slot) of submitted groups

    def status(self, worker_version: int) -> str:
        if self.useful >= (self.s + self.version + 1) * self.b:  # the window: S + 1 steps ahead of the learner
            return "wait"
        if self.useful // self.b - worker_version > self.s:  # the next slot's step is too far for its weights
            return "refresh"
        return "granted"

    def grant(self, worker_version: int, wanted: int) -> list[int]:
        slots = []
        while len(slots) < wanted and self.status(worker_version) == "granted":
            slots.append(self.next_slot)
            self.next_slot, self.useful = self.next_slot + 1, self.useful + 1
        return slots

    def take(self, step: int, count: int) -> list[int] | None:
        fresh = [(v, slot) for v, slot in self.buffer if step - v <= self.s]
        self.useful -= len(self.buffer) - len(fresh)  # stale groups dropped: their slots stop counting
        self.buffer = sorted(fresh)
        if len(self.buffer) < count:
            return None
        taken, self.buffer = self.buffer[:count], self.buffer[count:]
        return [v for v, _ in taken]


@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_the_coordinator_and_the_simulator_make_every_pacing_decision_alike(staleness):
    """One random event sequence (lease requests at various worker versions, submissions, expiries,
    learner steps) through the live coordinator, through the simulator's books and through
    :class:`Oracle`: same answers, same slots, same batches."""
    rng = random.Random(staleness)
    state = make_state(staleness=staleness, groups_per_step=3)
    sim = Simulation(scenario(recipe__staleness=staleness, recipe__learner__groups_per_step=3))
    assert type(sim.state.books.ledger) is type(state.books.ledger)
    oracle = Oracle(staleness, 3)
    worker = state.members.register("w")
    live_leases, sim_leases, step = [], [], 0
    decisions = 0
    for _ in range(400):
        event = rng.choice(["lease", "lease", "submit", "expire", "take"])
        if event == "lease":
            version = rng.randint(max(0, state.version - staleness - 1), state.version)
            wanted = rng.randint(1, 4)
            live = state.work.lease(worker, version, wanted, wait_s=0)
            status = sim.state.books.ledger.grantable(version)
            slots = list(sim.state.books.ledger.grant(version, wanted, lambda: None)) if status == "granted" else []
            assert live.status == status == oracle.status(version)
            assert [p.slot for p in live.prompts] == slots == oracle.grant(version, wanted)
            decisions += 1
            if slots:
                live_leases.append(live)
                sim_leases.append((version, slots))
        elif event in ("submit", "expire") and live_leases:
            index = rng.randrange(len(live_leases))
            live, (version, slots) = live_leases.pop(index), sim_leases.pop(index)
            if event == "submit":
                submit_all(state, worker, live)
                for slot in slots:
                    sim.state.books.ledger.admit(slot, version, version)
                    oracle.buffer.append((version, slot))
            else:
                state.leases.get(live.lease_id).deadline = 0
                state.members.reap()
                sim.state.books.ledger.release(slots, front=True)
                oracle.useful -= len(slots)
                worker.unfulfilled, worker.parked_until = 0, 0.0  # pacing alone: shares are tested apart
        elif event == "take":
            sim_batch = sim.state.books.ledger.take(step, 3)
            try:
                live_batch = [g.version for g in state.take_batch(step, timeout_s=0)]
            except TimeoutError:
                live_batch = None
            assert live_batch == sim_batch == oracle.take(step, 3)
            if live_batch is not None:
                step += 1
                publish(state, step)
                sim.state.books.ledger.version = oracle.version = step
        assert (state.books.ledger.useful_slots, state.books.ledger.dropped_stale) == (sim.state.books.ledger.useful_slots,
                                                                           sim.state.books.ledger.dropped_stale)
        assert state.books.ledger.useful_slots == oracle.useful
    assert step >= 5 and decisions >= 100  # the sequence went through many steps, not one corner
