"""The simulator's fetches along a relay plan (``simulation/fetching.py``), timed by hand.

Every link here moves one 1 MiB chunk per second and the payload is 8 chunks, with no latency
and no fixed fetch cost, so each expected time is a count of chunks.
"""

import pytest

from echo2.simulation.engine import Simulation
from echo2.simulation.scenario import parse_scenario
from echo2.units import MIB

ONE_CHUNK_PER_S_MBPS = 8 * MIB / 1e6
PAYLOAD_CHUNKS = 8


def fetch_times(workers: int, fan_out: int = 1, start: list[int] | None = None,
                die: tuple[int, float] | None = None) -> dict[int, float]:
    """Workers (planned in index order) holding version 0 fetch version 1 from t = 0 (only those
    in ``start``, default all); ``die``: (worker, time) it goes down. Returns when each has it."""
    sim = Simulation(parse_scenario({
        "name": "fetching", "model": {"name": "m", "parameters_b": 0.001, "payload_gb": PAYLOAD_CHUNKS * MIB / 1e9},
        "learner": {"train_step_s": 1.0, "upload_mbps": ONE_CHUNK_PER_S_MBPS},
        "recipe": {"run": {"steps": 1}, "learner": {"groups_per_step": 1}, "rollout": {"group_size": 2},
                   "protocol": "async", "staleness": 1},
        "broadcast": {"mode": "pipelined", "chunk_mib": 1.0, "fan_out": fan_out},
        "activation": {"enabled": False},
        "fleet": [{"name": f"w{i}", "count": 1, "rollouts_per_s": 1.0, "upload_mbps": ONE_CHUNK_PER_S_MBPS * (1 - i / 1e6)}
                  for i in range(workers)],  # uploads decreasing by a hair: the planner's order is the index
    }, "fetching"), timeline_workers=0)
    done: dict[int, float] = {}
    sim.lease_loop.fetches._fetched = lambda worker, epoch, version, begin: done.setdefault(
        sim.state.workers.index(worker), sim.state.queue.now)
    for worker in sim.state.workers:
        sim.lease_loop.run_worker(worker, holding=0)
        worker.phase = "generate"
    sim.state.books.census.publish(1, 0.0)
    sim.state.published_times.append(0.0)
    sim.state.books.ledger.version = 1
    for index in range(workers) if start is None else start:
        sim.lease_loop.fetches.begin(sim.state.workers[index], 0.0)
    if die is not None:
        sim.state.queue.at(die[1], sim.lease_loop.stop_running, sim.state.workers[die[0]])
    sim.state.queue.run(until=lambda: False)
    return done


def test_a_chain_pipelines_one_chunk_behind_each_parent():
    assert fetch_times(3) == pytest.approx({0: 8.0, 1: 9.0, 2: 10.0}, rel=1e-4)


def test_children_share_their_relays_uplink():
    # the head's two children get half its uplink each: 16 s, later than the pipeline's 9 s
    assert fetch_times(3, fan_out=2) == pytest.approx({0: 8.0, 1: 16.0, 2: 16.0}, rel=1e-4)


def test_a_relay_gone_down_sends_its_child_to_the_next_source_with_what_it_had():
    # the middle of a 3-chain dies at 4 s, the tail (4 chunks in) asks the head for the other 4,
    # alone on its uplink now, and still ends one chunk after the head
    assert fetch_times(3, die=(1, 4.0)) == pytest.approx({0: 8.0, 2: 9.0}, rel=1e-4)


def test_a_relay_with_nothing_of_the_version_is_abandoned_after_the_downloaders_patience():
    # the head never fetches v1: its child long-polls it for 2 x (stall 10 s + poll 2 s), then
    # takes the whole version from the learner
    assert fetch_times(2, start=[1]) == pytest.approx({1: 24.0 + 8.0}, rel=1e-4)
