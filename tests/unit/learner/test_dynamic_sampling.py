"""DAPO's dynamic sampling: degenerate groups are filtered and replaced from the buffer."""

from state_support import answering, make_state

from echo2.exchange import Group
from echo2.learner.dynamic_sampling import informative_batch
from echo2.protocol import GroupResult, SubmitRequest
from echo2.tasks import Example


def _group(slot: int, rewards: list[float]) -> Group:
    return Group(slot=slot, example=Example(f"{slot}+0=", str(slot)), version=0, worker_id="w",
                 token_ids=[[3]] * len(rewards), logprobs=[[-0.1]] * len(rewards), rewards=rewards)


class Buffer:
    """Hands out groups in order, ``take(n)`` at most n at a time."""

    def __init__(self, rewards: list[list[float]]) -> None:
        self.groups = [_group(i, r) for i, r in enumerate(rewards)]
        self.dropped: list[Group] = []

    def take(self, count: int) -> list[Group]:
        taken, self.groups = self.groups[:count], self.groups[count:]
        return taken

    def drop(self, groups: list[Group]) -> None:
        self.dropped += groups


MIXED, ALL_RIGHT, ALL_WRONG = [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]


def test_degenerate_groups_are_replaced_by_new_ones():
    buffer = Buffer([MIXED, ALL_RIGHT, ALL_WRONG, MIXED, ALL_RIGHT, MIXED, MIXED])
    sampled = informative_batch(buffer.take, buffer.drop, size=3, rounds=10)
    # draw 1: slots 0-2 (keeps 0); draw 2: slots 3-4 (keeps 3); draw 3: slot 5
    assert [g.slot for g in sampled.groups] == [0, 3, 5]
    assert [g.slot for g in buffer.dropped] == [g.slot for g in sampled.filtered] == [1, 2, 4]
    assert sampled.drawn == 6
    assert [g.slot for g in buffer.groups] == [6]  # nothing drawn beyond what the step needed


def test_draws_are_bounded_and_the_last_draw_fills_the_step():
    buffer = Buffer([ALL_RIGHT, MIXED, ALL_RIGHT, ALL_WRONG, ALL_RIGHT])
    sampled = informative_batch(buffer.take, buffer.drop, size=3, rounds=2)
    # draw 1: slots 0-2 (keeps 1, drops 0 and 2); draw 2 (the last): slots 3-4, kept although degenerate
    assert [g.slot for g in sampled.groups] == [1, 3, 4]
    assert [g.slot for g in buffer.dropped] == [g.slot for g in sampled.filtered] == [0, 2]
    assert sampled.drawn == 5


def _submit(state, worker, lease, rewards_by_slot):
    """Completions right or wrong so that the coordinator's verdict is ``rewards_by_slot(slot)``."""
    groups = [GroupResult(slot=p.slot, completions=answering(p.prompt, [r == 1.0 for r in rewards_by_slot(p.slot)]))
              for p in lease.prompts]
    state.work.submit(worker, SubmitRequest(lease_id=lease.lease_id, version=lease.version, groups=groups,
                                       generate_seconds=0.1))


def test_filtered_groups_free_their_slots_and_are_accounted():
    # S = 0, B = 2: the window holds 2 slots; slot 0 comes back all-correct and must be replaced
    state = make_state(staleness=0, groups_per_step=2)
    worker = state.members.register("w")
    first = state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0)
    assert [p.slot for p in first.prompts] == [0, 1]
    _submit(state, worker, first, lambda slot: ALL_RIGHT if slot == 0 else MIXED)
    assert state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0).status == "wait"  # window full

    def take(count: int) -> list[Group]:
        if not len(state.books.ledger):  # the worker answers the lease the filtered group made room for
            replacement = state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0)
            assert replacement.status == "granted" and len(replacement.prompts) == 1
            _submit(state, worker, replacement, lambda slot: MIXED)
        return state.take_batch(step=0, timeout_s=1, count=count)

    sampled = informative_batch(take, lambda groups: state.give_back(groups, "filtered"), size=2, rounds=5)
    assert [g.slot for g in sampled.groups] == [1, 2] and [g.slot for g in sampled.filtered] == [0]
    report = state.reliability()
    assert report["groups_filtered_degenerate"] == 1 and report["groups_trained"] == 2
    assert report["prompts_unaccounted"] == 0 and report["prompts_requeued"] == 0
    assert state.work.lease(worker, worker_version=0, max_groups=8, wait_s=0).status == "wait"  # step 0 is served
