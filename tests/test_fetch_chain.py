"""The fetch chain's rules (:mod:`echo2.core.fetch_chain`), driven alone (no threads, no sockets),
and a wrong rule in it shown to change both the live downloader and the simulated fetches."""

import pytest
from test_broadcast import peers  # noqa: F401 (the fixture)

from echo2.core.fetch_chain import SourceChain, default_patience_s


def test_a_failed_source_is_left_for_the_next_and_the_learner_is_retried():
    chain = SourceChain(["parent", "grandparent", "learner"], patience_s=8.0, now=0.0)
    assert chain.source == "parent"
    assert chain.fail(0, now=1.0) == "moved" and chain.source == "grandparent"
    assert chain.fail(0, now=1.1) == "behind" and chain.source == "grandparent"  # another thread moved it
    assert chain.fail(1, now=2.0) == "moved" and chain.source == "learner"
    assert chain.fail(2, now=3.0) == "retry" and chain.source == "learner"  # no further source
    with pytest.raises(ValueError, match="at least one source"):
        SourceChain([], patience_s=1.0, now=0.0)


def test_a_source_saying_not_yet_is_kept_while_its_own_progress_grows():
    chain = SourceChain(["parent", "learner"], patience_s=8.0, now=0.0)
    chain.not_yet(0, held=2, now=5.0)
    assert chain.held(0) == 2 and not chain.impatient(0, now=12.9)
    chain.not_yet(0, held=2, now=12.0)  # no new chunk: no progress
    assert chain.impatient(0, now=13.0) and chain.idle_s(0, now=13.0) == pytest.approx(8.0)
    chain.progressed(0, now=13.0)  # bytes arrived
    assert not chain.impatient(0, now=20.0)
    assert chain.fail(0, now=21.0) == "moved" and not chain.impatient(1, now=28.9)  # the next one's patience starts now


def test_patience_is_twice_the_stall_budget():
    assert default_patience_s(stall_s=6.0, poll_s=2.0) == 16.0


def _straight_to_the_learner(self, level, now):
    """A wrong rule: a failed source sends the fetch straight to the last source (the learner)."""
    if level < len(self.sources) - 1:
        self.level = len(self.sources) - 1
        self._progress_at[self.level] = now
        return "moved"
    return "retry"


def _live_chunks_from_the_learner(peers) -> int:
    """A receiver whose first source serves a corrupt chunk, then a good relay, then the learner."""
    from test_broadcast import TamperingStore, random_payload

    from echo2.units import MIB

    payload = random_payload(1 * MIB)
    learner, relay, liar = peers(None), peers(None), peers(None, TamperingStore())
    for peer in (learner, relay, liar):
        peer.store.publish(1, payload, chunk_size=128 * 1024)
    receiver = peers(None).fetch(1, [liar.url, relay.url, learner.url])
    receiver.thread.join(20)
    assert receiver.error is None and receiver.result.payload == payload, receiver.error
    return receiver.result.stats.chunks_by_source.get(learner.url, 0)


def _simulated_fetches_from_the_learner(monkeypatch) -> int:
    """A pipelined chain of spot workers, preempted often: fetches whose relay died move on."""
    from test_simulation import scenario

    from echo2.simulation.dissemination import LearnerUplink
    from echo2.simulation.engine import simulate

    served = []
    original = LearnerUplink.fetch
    monkeypatch.setattr(LearnerUplink, "fetch", lambda self, *args: served.append(1) or original(self, *args))
    simulate(scenario(recipe__run__steps=60, recipe__coordinator__heartbeat_timeout_s=2.0, model={"name": "m", "parameters_b": 0.05,
                                                                              "payload_gb": 0.4},
                      fleet=[{"name": "spot", "count": 6, "rollouts_per_s": 40.0, "preemption_per_hour": 600,
                              "recovery_s": 3.0, "upload_mbps": 400.0}]))
    return len(served)


@pytest.mark.integration
def test_a_wrong_rule_in_the_chain_changes_the_live_downloader_and_the_simulated_fetches(peers, monkeypatch):
    live, simulated = _live_chunks_from_the_learner(peers), _simulated_fetches_from_the_learner(monkeypatch)
    assert live == 0  # the good relay took over from the liar: the learner served nothing
    monkeypatch.setattr(SourceChain, "fail", _straight_to_the_learner)
    assert _live_chunks_from_the_learner(peers) > 0
    assert _simulated_fetches_from_the_learner(monkeypatch) > simulated
