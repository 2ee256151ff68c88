"""The coordinator does not take an advertised relay address at its word: a relay counts once it
answered as its own worker, and one on an address that means "this host" serves its host alone."""

from __future__ import annotations

import time

import pytest
from relay_reachability_support import (
    check,
    relay,  # noqa: F401 (fixtures)
)
from state_support import make_state

from echo2.broadcast.topology import LEARNER, Node, children_of, plan_tree
from echo2.coordinator.relay_check import host_scoped


@pytest.mark.parametrize("url, scoped", [
    ("http://127.0.0.1:9000", True), ("http://localhost:9000", True), ("http://[::1]:9000", True),
    ("http://169.254.3.4:9000", True), ("http://0.0.0.0:9000", True), ("https://[fe80::1]:443", True),
    ("http://10.77.2.2:9000", False), ("https://relay.example.org:8443", False), ("http://203.0.113.9:1", False),
])
def test_addresses_that_mean_this_host_are_host_scoped(url, scoped):
    assert host_scoped(url) is scoped


def test_a_host_scoped_relay_never_reaches_a_node_of_another_site():
    """The learner's host has two workers on loopback relays; two remote workers, one reachable:
    remote nodes never get the loopback relays as parent or fallback, local ones may."""
    local = [Node(f"l{i}", 100.0, site="127.0.0.1", scope="127.0.0.1") for i in range(2)]
    remote = [Node("r0", 50.0, site="10.77.2.2"), Node("r1", 40.0, reachable=False, site="10.77.3.2")]
    plan = plan_tree(local + remote, fan_out=1)
    for node in ("r0", "r1"):
        assert not {"l0", "l1"} & set(plan[node]), plan
        assert plan[node][-1] == LEARNER
    assert plan["r1"] == ["r0", LEARNER]  # the NAT'd one hangs below the reachable remote relay
    assert plan["l1"] == ["l0", LEARNER]  # a local worker may fetch from its neighbour's loopback relay


def test_nodes_without_sites_plan_as_before():
    nodes = [Node(f"w{i}", 10.0 + i) for i in range(4)]
    plan = plan_tree(nodes, fan_out=1)
    assert plan["w3"] == [LEARNER] and plan["w0"] == ["w1", "w2", "w3", LEARNER]


def test_a_relay_counts_once_it_answers_as_its_worker(relay):
    assert check(relay.url, "w1-abc") == (False, check(relay.url, "w1-abc")[1])  # not registered yet: 404
    relay.identity = "w1-abc"
    ok, why = check(relay.url, "w1-abc")
    assert ok and "answered as w1-abc" in why


class RecordingChecker:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def check(self, worker_id: str, url: str) -> None:
        self.asked.append((worker_id, url))

    def close(self) -> None:
        pass


def test_the_plan_waits_for_the_check():
    """A registered relay is a leaf until its check passes; without a checker (tests, the
    simulator) a relay is taken at its word."""
    state = make_state(staleness=1)
    trusted = state.members.register("w", relay_url="http://10.0.0.2:9000", site="10.0.0.2")
    assert trusted.relay_reachable is True
    state.parts.relay_checker = RecordingChecker()
    checked = state.members.register("v", relay_url="http://10.0.0.3:9000", site="10.0.0.3")
    assert state.parts.relay_checker.asked == [(checked.worker_id, "http://10.0.0.3:9000")]
    assert checked.relay_reachable is None
    assert not {n.id: n for n in state.registry.plan_nodes()}[checked.worker_id].reachable
    state.parts.relay_verdict(checked.worker_id, True, "answered")
    assert {n.id: n for n in state.registry.plan_nodes()}[checked.worker_id].reachable


@pytest.mark.parametrize("fan_out", [1, 2])
def test_with_half_the_workers_behind_nat_the_learner_sends_once(fan_out):
    """Leaves past the relays' fan-out go to the relay with the fewest children (the deepest on
    a tie), not to the learner: its uplink carries each version once."""
    public = [Node(f"p{i}", 10.0) for i in range(4)]
    private = [Node(f"n{i}", 10.0, reachable=False) for i in range(4)]
    plan = plan_tree(public + private, fan_out=fan_out)
    children = children_of(plan)
    assert children[LEARNER] == ["p0"]
    assert all(plan[n.id][0].startswith("p") for n in private)
    assert max(len(children[p.id]) for p in public) <= fan_out + 1  # the overflow is spread out
    assert plan_tree(private, fan_out=fan_out) == {n.id: [LEARNER] for n in private}  # no relay at all


def test_a_relay_a_peer_left_for_its_rate_leaves_every_chain_and_the_plan_a_while(monkeypatch):
    """A relay declaring 1e12 B/s heads the chain; its child reports it sent 300 B/s: no peer is
    sent there any more (this version's chains too), it is planned as a leaf at the measured rate,
    and its next demotion lasts four times longer. A worker cannot demote a relay it was not sent to."""
    from state_support import publish

    from echo2.coordinator import registry as registry_module
    from echo2.protocol import SlowSource

    state = make_state(staleness=1, planner=lambda nodes, incumbent: plan_tree(nodes, incumbent=incumbent))
    liar = state.members.register("liar", relay_url="http://10.9.9.9:7000", upload_bytes_per_s=1e12)
    child = state.members.register("child", relay_url="http://10.9.9.8:7000", upload_bytes_per_s=1e6)
    other = state.members.register("other", relay_url="http://10.9.9.7:7000", upload_bytes_per_s=1e5)
    publish(state, 1)
    assert state.version_info(child).sources[0] == liar.relay_url
    assert state.version_info(child).source_rates[liar.relay_url] == 1e12
    # a worker whose chains do not name the relay is not taken at its word
    state.members.heartbeat(liar, 1, [], slow_sources=[SlowSource(url=other.relay_url, bytes_per_s=1.0)])
    assert not other.relay_demoted(time.monotonic())
    state.members.heartbeat(child, 1, [], slow_sources=[SlowSource(url=liar.relay_url, bytes_per_s=300.0)])
    assert liar.relay_url not in state.version_info(child).sources  # at once, not from the next version
    assert liar.relay_url not in state.version_info(other).sources
    nodes = {node.id: node for node in state.registry.plan_nodes()}
    assert not nodes[liar.worker_id].reachable and nodes[liar.worker_id].upload_bytes_per_s == 300.0
    publish(state, 2)
    assert liar.relay_url not in state.version_info(other).sources
    first = liar.relay_demoted_until - time.monotonic()
    assert registry_module.DEMOTED_S - 5 < first <= registry_module.DEMOTED_S
    liar.relay_demoted_until = 0.0  # its time is up; it is a source again, then trickles again
    publish(state, 3)
    assert state.version_info(child).sources[0] != liar.relay_url  # planned at 300 B/s now: last
    state.registry.demote_relay(liar, 200.0, "left by child")
    assert liar.relay_demoted_until - time.monotonic() > 3 * registry_module.DEMOTED_S

