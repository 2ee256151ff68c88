"""Which source a version is fetched from, and when a source is given up: the rules of a node's
fallback chain ``[parent, grandparent, ..., learner]`` (the relay plan, :mod:`echo2.broadcast.topology`),
followed by the live downloader (:mod:`echo2.broadcast.downloader`: threads, HTTP, wall time)
and by the simulator (:mod:`echo2.simulation.fetching`: events, simulated time) alike.

* A source that fails (refused, reset, stalled, corrupt bytes) is left for the next one, and
  what was already verified is kept; the last source, the learner, is retried instead: there is
  no further one.
* A relay that sends, but too slowly, is judged by its rate (:func:`too_slow`): once a chunk's
  transfer has run the time the chunk takes at the relay's floor (:func:`rate_floor`), or
  ``stall_s`` if sooner, a rate below that floor fails it like a stall. Bytes alone are no proof of life: a relay trickling one byte a second, declaring 1e12 B/s,
  had held its child (and through it every node below) for as long as it liked, then the run.
* A relay that answers and then sends nothing is left once its silence outlasts what its planned
  rate explains (:func:`silence_s`): the queue of bodies an honest relay may send before it, and
  a little slack; never later than ``stall_s``.
* A source that answers "not yet" is normal in a pipeline (it waits on its own parent). It is kept
  while it makes progress of its own (the count of chunks it holds grows) and given up after
  ``patience_s`` without any: by default twice the stall budget (:func:`default_patience_s`), so
  that when a node high in a chain fails over, its descendants wait for it rather than all
  rushing the learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

#: Long-poll a chunk request asks a source for, seconds.
POLL_S = 2.0


#: A relay's floor as a fraction of the rate it is planned at (what it declared or measured of its
#: own uplink, or less where peers measured less): a relay splits its uplink among its children
#: (``broadcast.fan_out``) and its versions in flight, so an honest one sends each well above this.
RATE_FLOOR_FRACTION = 0.1

#: The floor of a relay whose rate nobody stated, bytes/s (128 kbit/s): a relay slower than that
#: serves a model of even 100 MB in hours, so its children are better off at the next source.
MIN_RELAY_BYTES_PER_S = 16_000.0


def rate_floor(planned_bytes_per_s: float | None) -> float:
    """The lowest rate (bytes/s) a relay planned at ``planned_bytes_per_s`` may send a chunk at."""
    return max(MIN_RELAY_BYTES_PER_S, RATE_FLOOR_FRACTION * (planned_bytes_per_s or 0.0))


#: Chunks an honest relay may have queued before one answer: relays send bodies in order, each at
#: the full uplink (:mod:`echo2.broadcast.throttle`), so an answer's first byte waits for the ones
#: before it; its children's requests in flight are far fewer than this.
QUEUED_CHUNKS = 16

#: Seconds on top of that queue before a silent relay is left: round trips, a loaded host's scheduling.
SILENCE_SLACK_S = 2.0


def silence_s(planned_bytes_per_s: float | None, chunk_bytes: int, stall_s: float) -> float:
    """How long a relay planned at ``planned_bytes_per_s`` may send nothing (its answer's head, then
    no byte of a ``chunk_bytes`` body; or no answer after its long-poll) before the chunk is asked
    of the next source: :data:`QUEUED_CHUNKS` chunks at its planned rate plus
    :data:`SILENCE_SLACK_S`, at most ``stall_s`` (also for a relay whose rate nobody stated).

    Why: a relay that answers and then goes silent held each child ``stall_s`` (plus the long-poll)
    every time the child came back to it, and with a 30 s skip the learner lost a fifth of its
    steps to one such relay declaring 1e12 B/s. The lie is what makes it quick to leave: at the
    rate it claims, no queue explains its silence. An honest slow relay is planned at its real
    rate and keeps the whole stall budget."""
    if not planned_bytes_per_s:
        return stall_s
    return min(stall_s, SILENCE_SLACK_S + QUEUED_CHUNKS * chunk_bytes / planned_bytes_per_s)


def too_slow(received: int, elapsed_s: float, floor_bytes_per_s: float, stall_s: float, chunk_bytes: int) -> bool:
    """A transfer of a ``chunk_bytes`` chunk that ``received`` bytes in ``elapsed_s`` (since its
    first byte) is to be given up: its rate stays under the floor once it is judged, which is after
    :data:`SILENCE_SLACK_S` plus the chunk's time at the floor rate, or ``stall_s`` if sooner.

    Why: before that a transfer is not judged (a slow start, a loaded host's scheduling), but no
    later: from its first byte an honest relay sends the body at its full uplink (bodies go out in
    order, :mod:`echo2.broadcast.throttle`), so one that has not sent the chunk by then is under its
    floor, whatever the stall budget allows. A relay trickling a byte every half second while
    declaring 1e12 B/s held each child the whole stall budget (10 s) at its first visit, a sixth of
    the learner's first minute of that attack; at its declared rate it is judged after 2 s. A relay
    whose rate nobody stated has the lowest floor, and with any chunk of size keeps the whole budget."""
    judged_after_s = min(stall_s, SILENCE_SLACK_S + chunk_bytes / floor_bytes_per_s) if floor_bytes_per_s else stall_s
    return elapsed_s >= judged_after_s and received < floor_bytes_per_s * elapsed_s


def default_patience_s(stall_s: float, poll_s: float = POLL_S) -> float:
    """How long a source that answers "not yet" is kept without progress of its own: twice the
    stall budget (a stalled source is dropped after ``stall_s`` plus the long-poll it was allowed)."""
    return 2 * (stall_s + poll_s)


class SourceChain:
    """One fetch's place in its chain (several fetching threads may share it under their lock)."""

    def __init__(self, sources: Sequence[str], patience_s: float, now: float) -> None:
        if not sources:
            raise ValueError("a fetch needs at least one source (the learner)")
        self.sources, self.patience_s = list(sources), patience_s
        self.level = 0
        """Index in ``sources`` of the source asked now."""
        self._progress_at = {0: now}
        self._held: dict[int, int] = {}

    @property
    def source(self) -> str:
        return self.sources[self.level]

    def progressed(self, level: int, now: float) -> None:
        """Bytes came from ``sources[level]`` (or the wait on it begins)."""
        self._progress_at[level] = now

    def not_yet(self, level: int, held: int, now: float) -> None:
        """``sources[level]`` does not have the chunk yet and holds ``held`` chunks of the version."""
        if held > self._held.get(level, -1):
            self._held[level] = held
            self._progress_at[level] = now

    def idle_s(self, level: int, now: float) -> float:
        return now - self._progress_at[level]

    def held(self, level: int) -> int:
        """Chunks ``sources[level]`` said it held, at most (0: it never said)."""
        return self._held.get(level, 0)

    def impatient(self, level: int, now: float) -> bool:
        """``sources[level]`` made no progress of its own for ``patience_s``: give it up."""
        return self.idle_s(level, now) >= self.patience_s

    def fail(self, level: int, now: float) -> Literal["moved", "behind", "retry"]:
        """``sources[level]`` failed: ``moved`` on to the next source, or found the chain already
        past it (``behind``: another fetching thread moved it), or ``retry`` it: it is the last."""
        if level < len(self.sources) - 1:
            if self.level > level:
                return "behind"
            self.level = level + 1
            self._progress_at[self.level] = now
            return "moved"
        self._progress_at[level] = now
        return "retry"
