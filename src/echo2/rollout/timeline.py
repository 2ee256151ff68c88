"""What a worker did and when (fetches, generations), sent with its heartbeats and submissions
for the run's timeline and the coordinator's dissemination figures."""

from __future__ import annotations

import threading

from echo2.protocol import TimelineEvent

#: Events one message carries at most (the rest go with the next).
EVENTS_PER_MESSAGE = 1000


class WorkerTimeline:
    def __init__(self) -> None:
        self._events: list[TimelineEvent] = []
        self._lock = threading.Lock()

    def record(self, kind: str, start: float, end: float, version: int, delta: bool = False) -> None:
        with self._lock:
            self._events.append(TimelineEvent(kind=kind, start=start, end=end, version=version, delta=delta))

    def drain(self) -> list[TimelineEvent]:
        """The oldest events not sent yet, taken."""
        with self._lock:
            events, self._events = self._events[:EVENTS_PER_MESSAGE], self._events[EVENTS_PER_MESSAGE:]
            return events

    def clear(self) -> None:
        """Forget them: they name versions of a learner that is gone (the coordinator would refuse them)."""
        with self._lock:
            self._events.clear()
