"""Relays judged by the rate they send at: a relay that trickles bytes is left within the stall
budget and reported, an honest throttled one is kept though its chunks outlast that budget, and
one that answers and then sends nothing is left as a stall and reported silent, which the
coordinator checks from its own host before it takes the relay out of the plan."""

import asyncio
import threading
import time

import pytest
from broadcast_support import (
    KIB,
    peers,  # noqa: F401 (fixtures)
    random_payload,
)
from fastapi import FastAPI

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.suspects import SuspectSources


class TricklingRelay:
    """A relay that answers as a relay should, its manifest and the chunk's length in full, and
    then sends the chunk's bytes a few at a time: every read makes progress, so only its rate tells
    it from a healthy relay (an attacker's, or a host whose uplink collapsed)."""

    def __init__(self, store: ChunkStore, bytes_per_tick: int = 16, tick_s: float = 0.05) -> None:
        from fastapi.responses import Response, StreamingResponse

        from echo2.net.serving import BackgroundServer

        app = FastAPI()
        self.served = 0

        @app.get("/v1/broadcast/{version}/manifest")
        def manifest(version: int) -> Response:
            return Response(store.manifest(version).model_dump_json(), media_type="application/json")

        @app.get("/v1/broadcast/{version}/chunks/{index}")
        async def chunk(version: int, index: int) -> StreamingResponse:
            data = store.get_chunk(version, index)

            async def trickle():
                for offset in range(0, len(data), bytes_per_tick):
                    await asyncio.sleep(tick_s)
                    self.served += bytes_per_tick
                    yield data[offset:offset + bytes_per_tick]

            return StreamingResponse(trickle(), media_type="application/octet-stream",
                                     headers={"content-length": str(len(data))})

        self.server = BackgroundServer(app, "127.0.0.1", 0, what="trickling relay", lifespan="off", graceful_s=0.5)

    def __enter__(self) -> str:
        self.server.start(10)
        return self.server.url

    def __exit__(self, *_: object) -> None:
        self.server.stop(timeout_s=3, abort=True)


def fetched_past(peers, size: int, declared: float | None, stall_s: float, tick_s: float):
    """A version of ``size`` bytes in 64 KiB chunks fetched one chunk at a time from a relay that
    sends a byte every ``tick_s`` (declaring ``declared`` B/s), then from the learner: the payload,
    the fetch's result, the relay's URL and the seconds the fetch took."""
    payload = random_payload(size)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=64 * KIB)
    with TricklingRelay(root.store, bytes_per_tick=1, tick_s=tick_s) as relay:
        started = time.monotonic()
        result = fetch_version(1, [relay, root.url], ChunkStore(), stall_s=stall_s, poll_s=0.3, timeout_s=30,
                               source_rates={relay: declared} if declared else None, in_flight=1)
        return payload, result, relay, time.monotonic() - started


@pytest.mark.parametrize("declared", [None, 1e12])
def test_a_trickling_relay_is_left_within_the_stall_budget_and_reported(peers, declared):
    """320 B/s: below the floor whether it declared nothing (the lowest floor, 16 kB/s) or 1e12 B/s
    (a tenth of that). It was kept for as long as it sent a byte now and then: a trickle of 273
    bytes had held a fleet's version for 145 s, then starved the learner."""
    payload = random_payload(256 * KIB)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=64 * KIB)
    suspects = SuspectSources()
    with TricklingRelay(root.store) as trickler:
        started = time.monotonic()
        result = fetch_version(1, [trickler, root.url], ChunkStore(), stall_s=0.5, poll_s=0.3, timeout_s=20,
                               suspects=suspects, source_rates={trickler: declared} if declared else None)
        elapsed = time.monotonic() - started
    assert result.payload == payload and result.stats.chunks_by_source == {root.url: root.store.manifest(1).num_chunks}
    assert elapsed < 3.0  # the stall budget (0.5 s) and the transfer from the learner, not the trickle
    assert any("too slow" in line for line in result.stats.failovers), result.stats.failovers
    reports = suspects.reports()
    assert list(reports) == [trickler] and reports[trickler] < 1000
    assert suspects.reports() == {}  # drained: reported once
    assert suspects.chain([trickler, root.url]) == [root.url]  # and not gone back to


def test_a_relay_trickling_under_a_high_declared_rate_is_left_long_before_the_stall_budget(peers):
    """Declaring 1e12 B/s, a 64 KiB chunk is due within the slack of its first byte: left after
    about 2 s, not the 8 s budget (the trickle attack's one stall had been a sixth of the learner's
    first minute). Judging it sooner keeps an honest relay: the next test's, at its declared rate."""
    from echo2.core.fetch_chain import SILENCE_SLACK_S, too_slow

    assert too_slow(100, SILENCE_SLACK_S + 0.01, 1e11, stall_s=8.0, chunk_bytes=64 * KIB)
    assert not too_slow(100, SILENCE_SLACK_S - 0.01, 1e11, stall_s=8.0, chunk_bytes=64 * KIB)
    assert not too_slow(100, 7.9, 16_000.0, stall_s=8.0, chunk_bytes=1 << 20)  # the lowest floor: the budget
    assert not too_slow(100, 60.0, 0.0, stall_s=8.0, chunk_bytes=1 << 20)  # the learner: never by rate
    payload, result, trickler, elapsed = fetched_past(peers, 128 * KIB, 1e12, stall_s=8.0, tick_s=0.5)
    assert result.payload == payload and trickler not in result.stats.chunks_by_source
    assert any("too slow" in line for line in result.stats.failovers), result.stats.failovers
    assert elapsed < 6.0, result.stats.failovers


def test_a_relay_at_its_declared_rate_is_kept_though_a_chunk_outlasts_the_stall_budget(peers):
    """128 KiB chunks at 128 KiB/s take a second each, twice the stall budget: judged by rate, kept."""
    payload = random_payload(256 * KIB)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=128 * KIB)
    relay = peers(128 * KIB)
    relay.store.publish(1, payload, chunk_size=128 * KIB)
    suspects = SuspectSources()
    result = fetch_version(1, [relay.url, root.url], ChunkStore(), stall_s=0.5, poll_s=0.3, timeout_s=20,
                           suspects=suspects, source_rates={relay.url: 128 * KIB}, in_flight=1)
    assert result.stats.chunks_by_source == {relay.url: relay.store.manifest(1).num_chunks}
    # The manifest (a few hundred bytes) is judged by the stall budget alone, and a busy machine may
    # hold its answer past 0.8 s; what is judged by rate here is the chunks.
    assert [failover for failover in result.stats.failovers if " manifest " not in failover] == []
    assert suspects.reports() == {}


def test_a_relay_that_answers_and_then_sends_nothing_is_left_as_a_stall_and_reported_silent(peers):
    """Its answer's head and then silence: the same to a peer as a link cut mid-answer, so it is
    left and suspected a while like any stall, and reported at 0 B/s, which the coordinator checks
    from its own host before it acts: a partition between two honest nodes must not cost a relay
    its place in everyone's plan."""
    payload = random_payload(128 * KIB)
    root = peers(None)
    root.store.publish(1, payload, chunk_size=64 * KIB)
    suspects = SuspectSources()
    with TricklingRelay(root.store, bytes_per_tick=1, tick_s=3600) as silent:
        result = fetch_version(1, [silent, root.url], ChunkStore(), stall_s=0.5, poll_s=0.3, timeout_s=20,
                               suspects=suspects)
    assert result.payload == payload and silent not in result.stats.chunks_by_source
    assert suspects.reports() == {silent: 0.0}  # reported silent: the coordinator asks it before it acts
    assert suspects.chain([silent, root.url]) == [root.url]


@pytest.mark.parametrize("declared", [None, 1e12])
def test_a_silent_relay_is_left_as_soon_as_its_planned_rate_explains_no_silence(peers, declared):
    """Declaring 1e12 B/s, no queue of bodies explains a second of silence: it is left after the
    long-poll and the slack (2 s), not the stall budget (6 s here); declaring nothing, it keeps
    the stall budget, as an honest relay of unknown rate does."""
    from echo2.core.fetch_chain import SILENCE_SLACK_S, silence_s

    assert silence_s(1e12, 1 << 20, stall_s=10.0) == pytest.approx(SILENCE_SLACK_S, abs=1e-3)
    assert silence_s(1e6, 1 << 20, stall_s=10.0) == 10.0  # 16 MiB at 1 MB/s: the stall budget bounds it
    assert silence_s(None, 1 << 20, stall_s=10.0) == 10.0
    payload, result, silent, elapsed = fetched_past(peers, 64 * KIB, declared, stall_s=6.0, tick_s=3600)
    assert result.payload == payload and silent not in result.stats.chunks_by_source
    if declared:
        assert elapsed < 0.3 + SILENCE_SLACK_S + 1.5, elapsed
    else:
        assert elapsed >= 6.0, elapsed


def test_a_relay_reported_silent_is_asked_by_the_coordinator_and_left_only_if_silent_there_too(peers):
    """A child that got no byte from its relay reports it at 0 B/s: a cut link between two honest
    nodes looks the same, so the coordinator asks the relay for a chunk itself. A relay that answers
    keeps its place; one silent to the coordinator too is taken out of every chain. One check of a
    relay at a time, and none again within a while, whatever the reports."""
    from state_support import make_state, publish

    from echo2.broadcast.topology import plan_tree
    from echo2.coordinator.relay_check import RelayChecker
    from echo2.protocol import SlowSource

    relay = peers(None)
    relay.store.publish(1, random_payload(64 * KIB), chunk_size=16 * KIB)
    state = make_state(staleness=1, planner=lambda nodes, incumbent: plan_tree(nodes, incumbent=incumbent))
    verdicts: list[tuple[str, bool]] = []
    done = threading.Event()
    checker = RelayChecker("broadcast-secret", lambda *_: None)
    state.parts.relay_checker = checker
    quiet = TricklingRelay(relay.store, bytes_per_tick=1, tick_s=3600)
    silent = state.members.register("silent", relay_url=quiet.__enter__(), upload_bytes_per_s=1e12)
    honest = state.members.register("honest", relay_url=relay.url, upload_bytes_per_s=1e9)
    child = state.members.register("child")
    publish(state, 1)
    for record in (silent, honest):
        record.loaded_version = 1
    asked: list[tuple[str, str, int]] = []
    real = checker.recheck

    def recheck(worker_id, url, version, budget_s, verdict):
        asked.append((worker_id, url, version))
        real(worker_id, url, version, 1.0, lambda *args: (verdict(*args), verdicts.append(args[:2]), done.set()))

    checker.recheck = recheck
    # the child's chains name both (the plan puts each in some child's chain; here, this one's)
    state.parts.versions.chains_of = lambda worker_id: [silent.worker_id, honest.worker_id]
    state.members.heartbeat(child, 1, [], slow_sources=[SlowSource(url=relay.url, bytes_per_s=0.0)])
    assert done.wait(10) and verdicts == [(honest.worker_id, True)]
    assert not honest.relay_demoted(time.monotonic())  # it answered: the child's link, not the relay
    done.clear()
    state.members.heartbeat(child, 1, [], slow_sources=[SlowSource(url=silent.relay_url, bytes_per_s=0.0)])
    assert done.wait(10) and verdicts[-1] == (silent.worker_id, False)
    quiet.__exit__()
    assert silent.relay_demoted(time.monotonic())  # silent here too: out of the plan
    assert not {node.id: node for node in state.registry.plan_nodes()}[silent.worker_id].reachable
    state.members.heartbeat(child, 1, [], slow_sources=[SlowSource(url=relay.url, bytes_per_s=0.0)])
    time.sleep(0.3)
    assert len(verdicts) == 2 and len(asked) == 3  # asked again, checked no sooner than RECHECK_EVERY_S
