"""When each worker holds a version: the relay plan of :mod:`echo2.broadcast.topology`, timed.

For every version the coordinator plans who fetches from whom (``plan_tree`` for ``pipelined``,
``star_plan`` for ``star``) among the workers running at publish time. Timing the plan:

* a node's delivery rate is the slowest share on its path: its parent's rate, the parent's
  uplink split among the parent's children, and its own downlink (the learner's uplink at the
  root). A star gives every worker ``B_L / N``; a chain the slowest uplink above the node;
* a node at depth ``d`` holds the whole payload ``(M + (d - 1) * chunk) / rate`` after the start
  (one chunk per hop fills the pipeline), plus the one-way latencies of the hops on its path;
* children sharing a parent's uplink (a star, a tree with fan-out) are not served at an even
  share each: echo2's throttle (:mod:`echo2.broadcast.throttle`) serves chunk requests first come
  first served and a fetch keeps ``IN_FLIGHT`` chunks asked at a time, so the ``k``-th of ``n``
  children is done at ``(n * (M - w) + k * w) / B`` with ``w = min(M, IN_FLIGHT * chunk)``: all
  near ``n * M / B`` for a payload of many chunks, one after another (``k * M / B``) for a
  payload of a window or less.

With zero latency the last node's time equals
:func:`echo2.planning.broadcast_time.broadcast_seconds` for the star and for chains (tested),
so the simulator and the capacity model share one dissemination model.

Versions share the learner's uplink: a version keeps it busy until its direct children hold it;
one published meanwhile waits, and when the uplink frees up only the newest waiting version is
sent (workers skip the others, as echo2's workers do). Links further down are taken as free when
a version starts: a relay slower than the version rate delays only its own subtree, whose workers
fetch one version at a time and skip to the newest (:mod:`echo2.simulation.workers`).

A star is timed fetch by fetch instead (:class:`StarUplink`): its workers fetch from the learner
alone, each on its own schedule, so on a saturated uplink they hold different versions, their
fetches a copy-time apart — which a wave per version, giving every worker the same version at
once, does not reproduce (``docs/simulation.md``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from echo2.broadcast.topology import LEARNER, Node, plan_tree, star_plan
from echo2.planning.broadcast_time import IN_FLIGHT
from echo2.simulation.events import EventQueue


@dataclass(frozen=True)
class Peer:
    """A running worker, as the broadcast sees it (bytes/s; ``math.inf`` = unlimited)."""

    id: str
    upload: float
    download: float
    one_way_s: float
    """Half the worker's round trip to the learner."""
    reachable: bool = True

    @property
    def node(self) -> Node:
        """The relay planner's view of this worker (made once per peer)."""
        node = self.__dict__.get("_node")
        if node is None:
            node = Node(self.id, self.upload, self.reachable)
            object.__setattr__(self, "_node", node)
        return node


@dataclass
class Timing:
    """Seconds after a version's start at which each planned worker holds it, and its rate."""

    offset: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)
    busy_s: float = 0.0
    """How long the version occupies the learner's uplink (the next version cannot start before)."""


def plan_timing(peers: Iterable[Peer], payload_bytes: float, learner_upload: float, mode: str, chunk_bytes: float,
                fan_out: int = 1, learner_fan_out: int = 1) -> Timing:
    """Time the plan the coordinator would make for ``peers`` (see the module docstring). A hop from
    the learner costs the worker's one-way latency to it; a hop between workers the mean of theirs."""
    peers = {p.id: p for p in peers}
    nodes = [p.node for p in peers.values()]
    plan = star_plan(nodes) if mode == "star" else plan_tree(nodes, fan_out, learner_fan_out)
    children: dict[str, int] = {LEARNER: 0}
    for sources in plan.values():
        children[sources[0]] = children.get(sources[0], 0) + 1
    chunk = min(chunk_bytes, payload_bytes)
    window = min(payload_bytes, IN_FLIGHT * chunk)
    timing = Timing()
    latency: dict[str, float] = {LEARNER: 0.0}
    rate: dict[str, float] = {LEARNER: math.inf}
    served: dict[str, int] = {}
    for node_id, sources in plan.items():  # parents come before their children in a plan
        parent, peer = sources[0], peers[node_id]
        uplink = learner_upload if parent == LEARNER else peers[parent].upload
        siblings = children[parent]
        rank = served[parent] = served.get(parent, 0) + 1
        rate[node_id] = min(rate[parent], uplink / siblings, peer.download)
        hop = peer.one_way_s if parent == LEARNER else (peers[parent].one_way_s + peer.one_way_s) / 2
        latency[node_id] = latency[parent] + hop
        own_rate = rate[node_id]  # what the worker's own fetch gets
        if rate[node_id] == math.inf:
            transfer = 0.0
        elif siblings > 1 and rate[node_id] == uplink / siblings:
            # the parent's throttle serves requests first come first served, a child keeping IN_FLIGHT
            # chunks asked at a time: the k-th child is done after all but the others' last windows
            transfer = (siblings * (payload_bytes - window) + rank * window) / uplink
            own_rate = payload_bytes / transfer
        else:
            transfer = (payload_bytes + (len(sources) - 1) * chunk) / rate[node_id]
        timing.offset[node_id] = transfer + latency[node_id]
        timing.rate[node_id] = own_rate
        if parent == LEARNER and rate[node_id] < math.inf:
            timing.busy_s = max(timing.busy_s, payload_bytes / rate[node_id])
    return timing


class Channel:
    """The learner's uplink as a server of versions: one version at a time, the newest waiting one next."""

    def __init__(self) -> None:
        self.free_at = 0.0
        self.pending: int | None = None
        """Newest version waiting for the links (older waiting ones are skipped)."""
        self.started: dict[int, tuple[float, Timing]] = {}
        """Version -> (start time, timing) of the versions sent, newest few kept."""
        self.newest_started = 0

    def start(self, version: int, now: float, timing: Timing, keep: int) -> None:
        self.started[version] = (now, timing)
        self.newest_started = version
        self.free_at = now + timing.busy_s
        self.pending = None
        for old in [v for v in self.started if v <= version - keep]:
            del self.started[old]


#: Chunks a :class:`StarUplink` times per fetch at most (larger ones for a payload of more): an
#: event per chunk, and a fetch's time shifts by at most a window of them (2 / 64 of the payload).
MAX_STAR_CHUNKS = 64


@dataclass
class StarFetch:
    """One worker's fetch of a whole version from the learner."""

    left: deque[float]
    """Sizes of the chunks not yet asked for."""
    download: float
    done: Callable[[], None]
    alive: Callable[[], bool]
    """False once the worker went down: its requests are dropped (its connections closed)."""
    outstanding: int = 0


class StarUplink:
    """The learner's uplink in a star, fetch by fetch, as echo2's throttle serves it
    (:mod:`echo2.broadcast.throttle`): chunk requests first come first served at ``upload``
    bytes/s (or the receiver's ``download``, when slower), each fetch keeping ``IN_FLIGHT`` chunks
    asked at a time. Fetches asked at once are served one after the other for a payload of a
    window or less and side by side for a larger one, as :func:`plan_timing` times a wave; fetches
    asked at different times (async workers fetching back to back) share the uplink from then on."""

    def __init__(self, queue: EventQueue, upload: float, payload: float, chunk: float) -> None:
        self.queue, self.upload = queue, upload
        chunk = max(chunk, payload / MAX_STAR_CHUNKS)
        full, rest = divmod(payload, chunk)
        self.chunks = [chunk] * int(full) + ([rest] if rest > 0 else [])
        self.requests: deque[tuple[StarFetch, float]] = deque()
        self.busy = False

    def fetch(self, download: float, done: Callable[[], None], alive: Callable[[], bool]) -> None:
        """Start a fetch of the whole payload; ``done()`` runs when its last chunk has arrived."""
        fetch = StarFetch(deque(self.chunks), download, done, alive)
        if not fetch.left:
            self.queue.after(0.0, done)
            return
        for _ in range(min(IN_FLIGHT, len(fetch.left))):
            self._ask(fetch)
        self._serve()

    def _ask(self, fetch: StarFetch) -> None:
        fetch.outstanding += 1
        self.requests.append((fetch, fetch.left.popleft()))

    def _serve(self) -> None:
        while not self.busy and self.requests:
            fetch, size = self.requests.popleft()
            if not fetch.alive():
                continue
            self.busy = True
            rate = min(self.upload, fetch.download)
            self.queue.after(size / rate if rate < math.inf else 0.0, self._served, fetch)

    def _served(self, fetch: StarFetch) -> None:
        self.busy = False
        fetch.outstanding -= 1
        if fetch.alive():
            if fetch.left:
                self._ask(fetch)
            elif not fetch.outstanding:
                fetch.done()
        self._serve()
