"""The worker's protocol core (:mod:`echo2.core.worker_protocol`), driven without threads or
sockets; and a wrong rule in it changes the live worker and the simulated one alike."""

import threading
import time
from types import SimpleNamespace

from echo2.core.worker_protocol import WorkerProtocol
from echo2.rollout.weights import WorkerWeights
from echo2.simulation.engine import SimulationStalled, simulate


# ---------------------------------------------------------------- the live worker and the simulator
def _live_worker_stages() -> int | None:
    """A live worker's weights (background fetcher thread, fake downloads): what it staged after
    hearing of v2."""
    weights = WorkerWeights(client=SimpleNamespace(), stop=threading.Event(), record=lambda *a, **k: None,
                            verify=True)
    spec = SimpleNamespace(protocol="async", swap_between_turns=False, swap_between_steps=False, max_turns=1)
    weights.start(spec, lambda payload, sha256: None, threading.Event())
    weights.protocol.loaded(0)
    weights.fetch_newest = lambda held: (2, b"weights", "sha") if held < 2 else None
    fetcher = threading.Thread(target=weights.background, daemon=True)
    fetcher.start()
    try:
        weights.heard(2)
        deadline = time.monotonic() + 3
        while weights.protocol.staged is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return weights.protocol.staged
    finally:
        weights.stop.set()
        fetcher.join(5)
        weights.close()


def _simulated_run_finishes() -> bool:
    from simulation_support import scenario

    try:
        simulate(scenario(recipe__run__steps=10))
    except SimulationStalled:
        return False
    return True


def test_a_wrong_rule_in_the_protocol_core_changes_the_live_worker_and_the_simulated_one(monkeypatch):
    assert _live_worker_stages() == 2 and _simulated_run_finishes()
    monkeypatch.setattr(WorkerProtocol, "wants_fetch", lambda self: False)  # never fetch in the background
    assert _live_worker_stages() is None
    assert not _simulated_run_finishes()  # its async workers wait for weights that never come
