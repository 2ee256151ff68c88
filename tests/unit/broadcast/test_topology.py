"""The relay planner (echo2.broadcast.topology): chains ordered by uplink, fan-out, unreachable leaves,
an order that measurement noise does not reshuffle."""

import pytest

from echo2.broadcast.topology import (
    LEARNER,
    REORDER_TOLERANCE,
    Node,
    children_of,
    depth,
    parent_of,
    plan_tree,
    relay_order,
    star_plan,
)


def nodes(count, slow=(), unreachable=()):
    return [Node(f"w{i}", 1.0 if f"w{i}" in slow else 10.0 + i % 3, f"w{i}" not in unreachable) for i in range(count)]


def assert_valid_plan(plan, node_list, fan_out, learner_fan_out):
    assert set(plan) == {n.id for n in node_list}
    parents = parent_of(plan)
    for node, sources in plan.items():
        assert sources[-1] == LEARNER and node not in sources and len(set(sources)) == len(sources)
        assert sources[1:] == (plan[sources[0]] if sources[0] != LEARNER else [])  # the fallback chain is the path
        walk, seen = node, set()
        while walk != LEARNER:  # no cycles: every walk up reaches the learner
            assert walk not in seen
            seen.add(walk)
            walk = parents[walk]
    children = children_of(plan)
    unreachable = {n.id for n in node_list if not n.reachable}
    for parent, kids in children.items():
        if parent in unreachable:
            assert kids == []
        elif parent != LEARNER:
            assert len(kids) <= fan_out
    return children


def test_chain_orders_by_bandwidth_and_keeps_unreachable_nodes_as_leaves():
    node_list = nodes(6, slow={"w1"}, unreachable={"w0"})
    plan = plan_tree(node_list, fan_out=1)
    assert_valid_plan(plan, node_list, 1, 1)
    assert plan["w0"] == ["w1", "w3", "w4", "w5", "w2", LEARNER]  # unreachable last, below the slowest
    assert plan["w2"] == [LEARNER] and plan["w5"] == ["w2", LEARNER]  # fastest first (w2, w5 tie at 12: by id)
    assert depth(plan) == 6


@pytest.mark.parametrize("count,fan_out,learner_fan_out", [(1, 1, 1), (7, 2, 1), (20, 3, 2), (9, 1, 3), (5, 0, 2)])
def test_tree_respects_fan_out(count, fan_out, learner_fan_out):
    node_list = nodes(count, unreachable={"w2", "w5"})
    plan = plan_tree(node_list, fan_out, learner_fan_out)
    children = assert_valid_plan(plan, node_list, fan_out, learner_fan_out)
    if fan_out > 0 and count > learner_fan_out:
        assert len(children[LEARNER]) == learner_fan_out
    if fan_out == 0:
        assert all(sources == [LEARNER] for sources in plan.values())


def test_all_unreachable_attach_to_the_learner_and_star_plan():
    node_list = nodes(4, unreachable={"w0", "w1", "w2", "w3"})
    assert plan_tree(node_list, fan_out=2) == {f"w{i}": [LEARNER] for i in range(4)}
    assert star_plan(nodes(3)) == {"w0": [LEARNER], "w1": [LEARNER], "w2": [LEARNER]}
    with pytest.raises(ValueError, match="unique"):
        plan_tree([Node("a", 1), Node("a", 2)])
    with pytest.raises(ValueError, match="reserved"):
        star_plan([Node(LEARNER, 1)])


def test_noise_between_equal_uplinks_keeps_every_parent_from_one_version_to_the_next():
    """Four equal 6 Mbit/s links measured within a few per cent of each other, the leaf still at its
    declared rate: a plain sort hands out new parents every version; the kept order does not."""
    previous = plan_tree([Node(f"w{i}", 750_000) for i in range(4)])
    noisy = [Node("w0", 786_842), Node("w1", 750_000), Node("w2", 798_517), Node("w3", 750_000)]
    assert list(plan_tree(noisy)) != list(previous)  # what the noise alone would do
    kept = plan_tree(noisy, incumbent=list(previous))
    assert kept == previous == {"w0": [LEARNER], "w1": ["w0", LEARNER], "w2": ["w1", "w0", LEARNER],
                                "w3": ["w2", "w1", "w0", LEARNER]}


def test_a_clearly_faster_uplink_behind_a_slower_one_reorders_the_whole_plan():
    incumbent = ["w0", "w1", "w2"]
    within = [Node("w0", 10.0), Node("w1", 10.0 * (1 + REORDER_TOLERANCE)), Node("w2", 9.0)]
    assert [n.id for n in relay_order(within, incumbent)] == incumbent
    beyond = [Node("w0", 10.0), Node("w1", 9.0), Node("w2", 9.0 * (1 + REORDER_TOLERANCE) * 1.01)]
    assert [n.id for n in relay_order(beyond, incumbent)] == ["w2", "w0", "w1"]  # sorted afresh
    # the check is against the slowest node ahead, not only the neighbour
    creeping = [Node("w0", 10.0), Node("w1", 12.0), Node("w2", 14.0)]
    assert [n.id for n in relay_order(creeping, incumbent)] == ["w2", "w1", "w0"]


def test_newcomers_join_at_the_tail_and_the_departed_leave_the_rest_in_place():
    incumbent = ["w0", "w1", "w2", "w3"]
    survivors = [Node("w3", 10.0), Node("w1", 10.2), Node("w9", 10.1), Node("w0", 9.9), Node("w5", 9.95)]
    assert [n.id for n in relay_order(survivors, incumbent)] == ["w0", "w1", "w3", "w9", "w5"]
    unreachable_newcomer = survivors + [Node("w4", 50.0, reachable=False)]
    assert [n.id for n in relay_order(unreachable_newcomer, incumbent)][-1] == "w4"  # its uplink serves nobody
    fast_newcomer = survivors + [Node("w7", 20.0)]
    assert relay_order(fast_newcomer, incumbent)[0].id == "w7"
