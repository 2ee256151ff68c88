"""Who fetches from whom: the broadcast plan, as each worker's ordered list of sources.

A plan maps every worker id to ``[parent, grandparent, ..., LEARNER]``: the first entry is
where it fetches from, the rest is its fallback chain (the downloader moves down it when a
source fails), and it always ends at the learner, which holds every version.

Why chains. The learner's uplink ``B`` is the bottleneck: sending ``M`` bytes to ``N`` workers
as a star costs ``N * M / B``. If every worker relays each chunk as soon as it has verified it,
the learner sends ``M`` once and the payload flows down the tree in a pipeline. A node with
``k`` children splits its uplink among them, so with homogeneous uplinks a tree of fan-out
``k`` delivers at ``B / k`` and takes about ``k * M / B``; a chain (``k = 1``) delivers at the
full ``B`` and only pays the pipeline fill, one chunk per hop::

    T_chain ≈ (M + (depth - 1) * chunk) / B

which is within ``(depth - 1) * chunk / M`` of the lower bound ``M / B`` (every byte has to
leave the learner once), whatever ``N``. Small chunks keep the fill small; deep chains add
one request latency per hop, and ``fan_out > 1`` trades some bandwidth for shallower trees.

The algorithm (``plan_tree``):

1. order nodes (``relay_order``): reachable ones by upload bandwidth, fastest first (ties by
   id), then the unreachable ones (behind NAT: they can download but nobody can connect to
   them) by id. Fast uplinks high in the tree matter because a node's rate is capped by the
   slowest uplink above it; the last nodes upload nothing, so they are the place for slow ones.
   The order is sticky: the coordinator plans every version from *measured* uplinks, and equal
   links measure a few per cent apart in noise, so a plain sort would hand workers new parents
   at almost every version (25 of 40 versions on a 4-worker chain of equal 6 Mbit/s links). A
   relay that changes parents asks one that may still be busy with an older version, and the
   pipeline restarts. So the previous plan's order (``incumbent``) stands, newcomers appended
   last, unless some node in it uplinks more than ``REORDER_TOLERANCE`` faster than a node
   ahead of it; only then is the order sorted afresh;
2. assign parents breadth-first: the learner takes the first ``learner_fan_out`` nodes, then
   each reachable node in turn takes up to ``fan_out`` children; unreachable nodes never get
   children (they are leaves). A relay with a ``scope`` (an address that means "this host")
   takes only children of its own site, and no chain names it to a node of another site;
3. nodes left when no parent has a free slot are unreachable leaves (reachable nodes always
   open slots of their own): each goes to the relay it may use with the fewest children, the
   deepest on a tie (it slows the fewest nodes below it), beyond ``fan_out``: with half the
   workers behind NAT the learner still sends each version about once. Only when there is no
   such relay (everything unreachable, or ``fan_out = 0``) does a node fetch from the learner.

Pure functions; ``star_plan`` is the baseline where everyone fetches from the learner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The source every fallback chain ends at.
LEARNER = "learner"

#: How much faster (relative) a node's uplink must be than that of a node ahead of it in the
#: previous order before the relay order is sorted afresh (see ``relay_order``): wider than the
#: noise between equal measured links, narrower than any difference worth a reshuffle.
REORDER_TOLERANCE = 0.25


@dataclass(frozen=True)
class Node:
    id: str
    upload_bytes_per_s: float
    """Measured or declared uplink; only the order matters."""
    reachable: bool = True
    """False: can download but not serve (e.g. behind NAT); only ever a leaf."""
    site: str = ""
    """Where the node is, as the coordinator saw it connect (its source address)."""
    scope: str | None = None
    """None: its relay can be reached from anywhere; else only by nodes whose ``site`` is this
    (a relay on a loopback or link-local address serves its own host alone)."""

    def can_fetch_from(self, parent: str | Node) -> bool:
        """Whether this node may be sent to ``parent`` (the learner, or another node) for chunks."""
        return parent == LEARNER or parent.scope is None or parent.scope == self.site


Plan = dict[str, list[str]]

#: What the coordinator plans each version with: the live nodes and the previous plan's order.
Planner = Callable[[list[Node], Sequence[str]], Plan]


def _check(nodes: list[Node]) -> None:
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"node ids must be unique: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    if LEARNER in ids:
        raise ValueError(f"{LEARNER!r} is reserved for the learner; rename that node")


def star_plan(nodes: list[Node], incumbent: Sequence[str] = ()) -> Plan:
    """Everyone fetches from the learner (the baseline the pipeline is compared with); a star has
    no order to keep, so ``incumbent`` is accepted only for the planners' common signature."""
    _check(nodes)
    return {node.id: [LEARNER] for node in nodes}


def relay_order(nodes: list[Node], incumbent: Sequence[str] = (),
                tolerance: float = REORDER_TOLERANCE) -> list[Node]:
    """Step 1 of the module docstring: the reachable nodes, fastest uplink first, then the
    unreachable ones by id; the ``incumbent`` order (the previous plan's) kept while no node in
    it is more than ``tolerance`` faster than one ahead of it."""
    reachable = sorted((n for n in nodes if n.reachable), key=lambda n: (-n.upload_bytes_per_s, n.id))
    unreachable = sorted((n for n in nodes if not n.reachable), key=lambda n: n.id)
    rank = {node_id: i for i, node_id in enumerate(incumbent)}
    kept = sorted(reachable, key=lambda n: rank.get(n.id, len(rank)))  # stable: newcomers keep the sorted order
    slowest_ahead = math.inf
    for node in kept:
        if node.upload_bytes_per_s > slowest_ahead * (1 + tolerance):
            return reachable + unreachable
        slowest_ahead = min(slowest_ahead, node.upload_bytes_per_s)
    return kept + unreachable


def plan_tree(nodes: list[Node], fan_out: int = 1, learner_fan_out: int = 1, incumbent: Sequence[str] = ()) -> Plan:
    """The relay tree described in the module docstring; ``fan_out=1`` gives a chain. ``incumbent``
    is the previous plan's order (``list(previous_plan)``), which a new plan keeps where it can."""
    _check(nodes)
    if fan_out < 0 or learner_fan_out < 1:
        raise ValueError(f"need fan_out >= 0 and learner_fan_out >= 1 (got {fan_out}, {learner_fan_out})")
    plan: Plan = {}
    by_id: dict[str, str | Node] = {LEARNER: LEARNER, **{n.id: n for n in nodes}}
    open_parents: list[list] = [[LEARNER, learner_fan_out]]  # [id, free child slots], breadth-first
    scoped = any(n.scope is not None for n in nodes)  # else every node may fetch from any (a chain's lists are long)
    for node in relay_order(nodes, incumbent):
        slot = next((entry for entry in open_parents if node.can_fetch_from(by_id[entry[0]])), None)
        if slot is not None:
            parent = slot[0]
            slot[1] -= 1
            if slot[1] == 0:
                open_parents.remove(slot)
        else:
            parent = _overflow_parent(node, plan, by_id) if fan_out > 0 else LEARNER
        inherited = [] if parent == LEARNER else plan[parent]
        if scoped:
            inherited = [s for s in inherited if node.can_fetch_from(by_id[s])]
        plan[node.id] = [parent, *inherited]
        if node.reachable and fan_out > 0:
            open_parents.append([node.id, fan_out])
    return plan


def _overflow_parent(leaf: Node, plan: Plan, by_id: dict[str, str | Node]) -> str:
    """Step 3: the relay ``leaf`` may use with the fewest children, the deepest on a tie; else the learner."""
    relays = [n for n in plan if by_id[n].reachable and leaf.can_fetch_from(by_id[n])]
    if not relays:
        return LEARNER
    children = children_of(plan)
    return min(relays, key=lambda n: (len(children[n]), -len(plan[n])))


def parent_of(plan: Plan) -> dict[str, str]:
    return {node: sources[0] for node, sources in plan.items()}


def children_of(plan: Plan) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {LEARNER: [], **{node: [] for node in plan}}
    for node, sources in plan.items():
        children[sources[0]].append(node)
    return children


def depth(plan: Plan) -> int:
    """Hops from the learner to the deepest node (1 for a star, N for a chain of N)."""
    return max((len(sources) for sources in plan.values()), default=0)
