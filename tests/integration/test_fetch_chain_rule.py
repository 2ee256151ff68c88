"""The fetch chain's rules (:mod:`echo2.core.fetch_chain`), driven alone (no threads, no sockets),
and a wrong rule in it shown to change both the live downloader and the simulated fetches."""


from broadcast_support import peers  # noqa: F401 (fixtures)

from echo2.core.fetch_chain import SourceChain


def _straight_to_the_learner(self, level, now):
    """A wrong rule: a failed source sends the fetch straight to the last source (the learner)."""
    if level < len(self.sources) - 1:
        self.level = len(self.sources) - 1
        self._progress_at[self.level] = now
        return "moved"
    return "retry"


def _live_chunks_from_the_learner(peers) -> int:
    """A receiver whose first source serves a corrupt chunk, then a good relay, then the learner."""
    from broadcast_support import TamperingStore, random_payload

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
    from simulation_support import scenario

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


def test_a_wrong_rule_in_the_chain_changes_the_live_downloader_and_the_simulated_fetches(peers, monkeypatch):
    live, simulated = _live_chunks_from_the_learner(peers), _simulated_fetches_from_the_learner(monkeypatch)
    assert live == 0  # the good relay took over from the liar: the learner served nothing
    monkeypatch.setattr(SourceChain, "fail", _straight_to_the_learner)
    assert _live_chunks_from_the_learner(peers) > 0
    assert _simulated_fetches_from_the_learner(monkeypatch) > simulated
