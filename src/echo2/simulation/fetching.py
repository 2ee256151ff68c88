"""Fetches, one by one, along the sources the coordinator gives each worker.

What the real worker and downloader do (``rollout/worker.py``, ``broadcast/downloader.py``,
``broadcast/chunk_store.py``), event by event:

* a fetch asks the coordinator for the newest version and the worker's sources: its place in the
  relay plan (``plan_tree`` over the running workers, ``pipelined``; the learner alone, ``star``)
  as a fallback chain ``[parent, grandparent, ..., learner]``;
* from the learner it is served chunk by chunk (:class:`~echo2.simulation.dissemination.LearnerUplink`);
* from a relay that holds the version, or is receiving it, it shares the relay's uplink with the
  relay's other fetches (:class:`~echo2.simulation.dissemination.RelayUplink`); a child cannot
  get ahead of its parent, so a version still arriving at the relay ends one chunk after the
  relay's own (the pipeline);
* a relay that holds a newer version and not the one asked for answers at once that it never
  will (skipped, or evicted: a node keeps two versions), and the worker asks for the newest;
* a relay that holds nothing of it yet is long-polled while it makes progress, and abandoned for
  the next source after ``patience`` without any; a relay gone down is abandoned at once, and a
  fetch cut off there resumes from the next source with the bytes it already had — the chain's
  rules are the downloader's own (:class:`echo2.core.fetch_chain.SourceChain`).

A fetch ends when its last byte is in, plus the hop's one-way latency and the class's fixed
``fetch_delay_s`` (:meth:`~echo2.simulation.workers.WorkerLoop.fetched`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from echo2.broadcast.chunk_store import KEEP_VERSIONS
from echo2.broadcast.topology import LEARNER, plan_tree
from echo2.core.fetch_chain import SourceChain
from echo2.simulation.fleet import Fetch, SimWorker
from echo2.simulation.state import SimState


class Fetches:
    """Every worker's fetches over the books, timed along its sources; ``fetched`` is told when a
    fetch's last byte is in (the worker's side takes it from there: :mod:`echo2.simulation.workers`)."""

    def __init__(self, state: SimState, fetched: Callable[[SimWorker, int, int, float], None]) -> None:
        self.state, self._fetched = state, fetched

    def begin(self, worker: SimWorker, begin: float) -> None:
        """Fetch the newest version, asking the coordinator for it at ``begin``."""
        worker.protocol.fetch_started()
        self.state.queue.at(begin, self._ask_version, worker, worker.epoch, begin)

    def _ask_version(self, worker: SimWorker, epoch: int, begin: float) -> None:
        """``GET /v1/version``: the newest version and this worker's sources."""
        if epoch != worker.epoch:
            return
        version = self.state.version_at(self.state.queue.now - worker.rtt_s / 2)
        chain = SourceChain(self._sources(worker), self.state.patience_s, self.state.queue.now)
        self._try_source(Fetch(worker, epoch, version, chain, begin, self.state.payload))

    def _sources(self, worker: SimWorker) -> list[str]:
        """The worker's fallback chain in the plan the coordinator makes for the running workers."""
        if self.state.scenario.broadcast.mode == "star":
            return [LEARNER]
        if self.state.plan_cache is None or self.state.plan_cache[0] != self.state.membership:
            broadcast = self.state.scenario.broadcast
            incumbent = list(self.state.plan_cache[1]) if self.state.plan_cache is not None else []
            nodes = [w.peer.node for w in self.state.running.values()]
            plan = plan_tree(nodes, broadcast.fan_out, broadcast.learner_fan_out, incumbent)
            self.state.plan_cache = (self.state.membership, plan)
        return self.state.plan_cache[1].get(worker.worker_id, [LEARNER])

    def _try_source(self, fetch: Fetch) -> None:
        """Ask ``fetch``'s current source for its version (see the module docstring)."""
        if not fetch.live():
            return
        worker, source = fetch.worker, fetch.chain.source
        if source == LEARNER:
            self._start_receiving(fetch, None)
            self.state.learner_uplink.fetch(worker.download, lambda: self._transferred(fetch, worker.peer.one_way_s),
                                      fetch.live, fetch.left)
            return
        relay = self.state.workers_by_id[source]
        if not relay.running:  # connection refused
            self._next_source(fetch)
        elif fetch.version in relay.held or fetch.version == relay.receiving:
            self._start_receiving(fetch, relay)
            fetch.upstream = relay.inbound if fetch.version == relay.receiving else None
            fetch.flow = relay.uplink.send(fetch.left, worker.download, lambda: self._relayed(fetch))
            relay.serving.append(fetch)
        elif fetch.version < relay.newest:  # skipped or evicted there: ask for the newest at once
            fetch.patience += 1
            self.state.queue.after(worker.rtt_s, self._ask_version, worker, fetch.epoch, fetch.begin)
        else:  # nothing of it there yet: long-poll while the relay makes progress
            if fetch.relay is not relay:
                fetch.relay = relay
                self.state.queue.after(fetch.chain.patience_s, self._give_up, fetch, fetch.patience)
            relay.waiters.append(fetch)

    def _start_receiving(self, fetch: Fetch, relay: SimWorker | None) -> None:
        """The worker's store takes the version's manifest: its own children asking for it follow."""
        fetch.patience += 1
        fetch.relay = relay
        worker = fetch.worker
        if worker.receiving != fetch.version:
            if worker.receiving >= 0 and worker.inbound is not None:
                self._abandon(worker, worker.inbound)
            if len(worker.held) >= KEEP_VERSIONS:  # the one arriving included
                self._evict(worker, worker.held.popleft())
            worker.receiving = fetch.version
        worker.inbound = fetch
        waiters, worker.waiters = worker.waiters, []
        for waiter in waiters:
            self._try_source(waiter)

    def _evict(self, relay: SimWorker, version: int) -> None:
        """The relay's store drops ``version``: the fetches it was sending of it are told it is
        gone and ask for the newest (what they had of it is of no use for another version)."""
        for fetch in [f for f in relay.serving if f.version == version]:
            relay.uplink.cancel(fetch.flow)
            relay.serving.remove(fetch)
            fetch.relay, fetch.flow = None, None
            if fetch.live():
                self.state.queue.after(fetch.worker.rtt_s, self._ask_version, fetch.worker, fetch.epoch, fetch.begin)

    def _abandon(self, relay: SimWorker, fetch: Fetch) -> None:
        """The relay went on to a newer version without finishing ``fetch``'s: what it was passing
        on of it stops there, and its children get the rest from their next sources."""
        cut = [(f, relay.uplink.cancel(f.flow)) for f in relay.serving if f.version == fetch.version]
        relay.serving = [f for f in relay.serving if f.version != fetch.version]
        self._resume_elsewhere(cut + [(f, self.state.chunk) for f in fetch.followers])
        fetch.followers = []

    def _resume_elsewhere(self, cut: list[tuple[Fetch, float]]) -> None:
        """Fetches broken off at their source, with the bytes each still needs: the next source."""
        for fetch, left in cut:
            if fetch.live():
                fetch.left = max(left, self.state.chunk)
                self._next_source(fetch)

    def _give_up(self, fetch: Fetch, patience: int) -> None:
        """No progress from the relay waited on for ``patience_s``: the next source."""
        if fetch.live() and fetch.patience == patience:
            assert fetch.relay is not None
            fetch.relay.waiters = [w for w in fetch.relay.waiters if w is not fetch]
            self._next_source(fetch)

    def _next_source(self, fetch: Fetch) -> None:
        fetch.patience += 1
        fetch.relay, fetch.flow, fetch.upstream = None, None, None
        fetch.chain.fail(fetch.chain.level, self.state.queue.now)  # the next source; the learner is retried
        self._try_source(fetch)

    def _relayed(self, fetch: Fetch) -> None:
        """The relay sent its share; a version the relay itself is still receiving ends one chunk
        after the relay's own fetch (the child cannot overtake it)."""
        relay, upstream = fetch.relay, fetch.upstream
        assert relay is not None
        relay.serving.remove(fetch)
        fetch.flow = None
        if upstream is None:
            self._transferred(fetch, self._hop_s(fetch))
        elif upstream.ended_at is None:
            upstream.followers.append(fetch)
        else:
            self._after_upstream(fetch, upstream.ended_at)

    def _after_upstream(self, fetch: Fetch, upstream_end: float) -> None:
        """A fetch pipelined on its relay's own ends a chunk after it (at the rate between the two)."""
        assert fetch.relay is not None
        chunk_s = self.state.chunk / min(fetch.relay.upload, fetch.worker.download)
        self.state.queue.at(max(self.state.queue.now, upstream_end + chunk_s), self._transferred, fetch,
                            self._hop_s(fetch))

    def _hop_s(self, fetch: Fetch) -> float:
        relay = fetch.relay
        return (relay.peer.one_way_s + fetch.worker.peer.one_way_s) / 2 if relay else fetch.worker.peer.one_way_s

    def _transferred(self, fetch: Fetch, latency: float) -> None:
        """The version's last byte is in the worker's store (relayed on from now); the worker
        has it ``latency`` + ``fetch_delay_s`` later."""
        if not fetch.live():
            return
        worker = fetch.worker
        fetch.ended_at = self.state.queue.now
        worker.receiving, worker.inbound = -1, None
        worker.held.append(fetch.version)
        for follower in fetch.followers:
            if follower.live():
                self._after_upstream(follower, fetch.ended_at)
        self.state.queue.after(latency + worker.spec.fetch_delay_s, self._fetched, worker, fetch.epoch, fetch.version,
                         fetch.begin)

    def drop(self, worker: SimWorker) -> None:
        """The worker went down (its epoch already bumped): free its share of its source's uplink,
        and send every fetch it served or was about to serve on to the next source."""
        inbound = worker.inbound
        if inbound is not None and inbound.flow is not None and inbound.relay is not None:
            inbound.relay.uplink.cancel(inbound.flow)
            inbound.relay.serving.remove(inbound)
        cut = [(f, worker.uplink.cancel(f.flow)) for f in worker.serving if f.flow is not None]
        cut += [(f, self.state.chunk) for f in (inbound.followers if inbound else [])]
        cut += [(f, f.left) for f in worker.waiters]
        worker.serving, worker.waiters, worker.inbound = [], [], None
        worker.receiving, worker.held = -1, deque()
        self._resume_elsewhere(cut)
