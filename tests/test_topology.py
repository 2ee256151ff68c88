"""The relay planner (echo2.broadcast.topology): chains ordered by uplink, fan-out, unreachable leaves."""

import pytest

from echo2.broadcast.topology import LEARNER, Node, children_of, depth, parent_of, plan_tree, star_plan


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
