"""The task's verifier and environment in processes of their own, each call bounded in time.

The coordinator scores what workers submit (:mod:`echo2.coordinator.scoring`) in its HTTP handler
threads. A verifier can be slow on crafted input: math-verify parses a completion's LaTeX with
sympy, whose simplification of an adversarial expression can run for minutes, and its own timeouts
use SIGALRM, which only a process's main thread may set — in a handler thread it runs unbounded,
and a Python thread cannot be stopped. A worker could then hold the coordinator's threads and
cores with a few submissions.

So with ``coordinator.scoring_processes`` > 0 the run's task is rebuilt (``load_task`` of the
run's task name and options) in that many spawned processes, where it runs on the main thread
(math-verify's own timeouts work there), and every call is bounded by
``coordinator.scoring_timeout_s``. A process that overruns is killed and replaced, and the call
raises :class:`ScoringOverrun`: the submission is refused (``scoring_overrun``; its lease's prompts go to
another worker once the lease expires), or the episode ends, as when a verifier or an
environment raises. Nothing is made up for an unverified completion — no reward of 0 the learner
would train on — and one submission costs the coordinator at most one ``scoring_timeout_s``.

:class:`ScoringProcesses` answers ``episode_rewards`` (a group's) and ``respond`` as a task
does, so the coordinator's :func:`~echo2.coordinator.scoring.task_scorer` reads it like the task
itself: one round trip a group (about 0.05 ms here), not one a completion. Calls are pure
functions of their arguments (every task replays an episode from its replies), so any process may
answer any call.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from echo2.tasks import Example, load_task

log = logging.getLogger("echo2")

class ScoringError(RuntimeError):
    """A call the scoring processes could not answer: the verifier raised, or its process died."""


class ScoringOverrun(ScoringError):
    """A call ran past ``scoring_timeout_s``; its process was killed and replaced."""


def serve(task_name: str, options: dict[str, Any], conn: Connection) -> None:
    """A scoring process: build the task, say ready (or why not), then answer calls until the
    coordinator closes its end. A verifier's exception goes back as text; the process lives on."""
    try:
        task = load_task(task_name, options)
    except Exception as error:  # noqa: BLE001 (reported to the coordinator, which fails the run clearly)
        conn.send(("error", f"{type(error).__name__}: {error}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            method, example, argument = conn.recv()
        except EOFError:  # the coordinator closed its end, or died
            return
        try:
            value = getattr(task, method)(example, argument)
        except Exception as error:  # noqa: BLE001 (a completion must not end the process)
            conn.send(("error", f"{type(error).__name__}: {error}"[:300]))
        else:
            conn.send(("ok", value))


@dataclass(eq=False)
class _Process:
    process: BaseProcess
    conn: Connection

    def stop(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


def _stop_all(processes: set[_Process]) -> None:
    for process in list(processes):
        process.stop()
    processes.clear()


class ScoringProcesses:
    """``processes`` spawned processes holding the run's task; ``episode_rewards`` and ``respond``
    as the task's, each call bounded by ``timeout_s``. A call waits at most ``wait_s`` for a free
    process; starting one may take ``start_timeout_s``. :meth:`close` (or the object's collection,
    or the interpreter's exit) stops them.

    A process that cannot be replaced (the machine out of memory, say) leaves the pool one short
    for a while, not for the run: a call made ``restore_every_s`` or more after the failure starts
    one again first. With none left a call is refused at once, with the reason, rather than after
    ``wait_s`` for a process that will never be free."""

    def __init__(self, task_name: str, options: dict[str, Any], processes: int, timeout_s: float,
                 start_timeout_s: float = 60.0, restore_every_s: float = 30.0) -> None:
        if processes < 1:
            raise ValueError(f"scoring processes: {processes}, need at least 1")
        self.task_name, self.options, self.size = task_name, dict(options), processes
        self.timeout_s, self.start_timeout_s, self.restore_every_s = timeout_s, start_timeout_s, restore_every_s
        self.wait_s = 3 * timeout_s + start_timeout_s  # a caller ahead of it overruns, and its process is replaced
        self.overruns = 0
        self._closed = False
        self._short = ""  # why the latest process that failed to start did (said when none is left)
        self._restore_at = 0.0  # monotonic time from which a call may start a missing process
        self._restoring = False
        self._context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._live: set[_Process] = set()
        self._idle: queue.SimpleQueue[_Process] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _stop_all, self._live)
        starting = [self._spawn() for _ in range(processes)]  # all start at once, then each is awaited
        try:
            for process in starting:
                self._await_ready(process)
                self._idle.put(process)
        except ScoringError:
            self.close()
            raise

    def episode_rewards(self, example: Example, episodes: list[list[str]]) -> list[float]:
        return list(self._call("episode_rewards", example, episodes))

    def respond(self, example: Example, replies: list[str]) -> str | None:
        return self._call("respond", example, replies)

    def close(self) -> None:
        self._closed = True
        self._finalizer()

    def _spawn(self) -> _Process:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=serve, args=(self.task_name, self.options, theirs),
                                        name="echo2-scoring", daemon=True)
        process.start()
        theirs.close()  # the child holds its end: our reads see EOF when it dies
        started = _Process(process, ours)
        with self._lock:
            self._live.add(started)
        return started

    def _await_ready(self, process: _Process) -> None:
        try:
            if not process.conn.poll(self.start_timeout_s):
                raise ScoringError(f"a scoring process did not build task {self.task_name!r} within "
                                   f"{self.start_timeout_s:.0f} s")
            status, detail = process.conn.recv()
        except (EOFError, OSError):
            status, detail = "error", f"the process exited (code {process.process.exitcode})"
        if status != "ready":
            self._retire(process)
            raise ScoringError(f"a scoring process could not build task {self.task_name!r}: {detail}")

    def _retire(self, process: _Process) -> None:
        with self._lock:
            self._live.discard(process)
        process.stop()

    def _replace(self, process: _Process) -> None:
        """Kill ``process`` and put a fresh one in its place (said, when it cannot start: one fewer)."""
        self._retire(process)
        self._start_one()

    def _start_one(self) -> None:
        """Start a process into the pool; when it cannot start, say why and try again no sooner
        than ``restore_every_s`` from now."""
        if self._closed:
            return
        try:
            fresh = self._spawn()
            self._await_ready(fresh)
        except ScoringError as error:
            with self._lock:
                self._short, self._restore_at = str(error), time.monotonic() + self.restore_every_s
            log.error("scoring: %s; %d of %d scoring processes left, another tried in %g s", error,
                      len(self._live), self.size, self.restore_every_s)
            return
        self._idle.put(fresh)

    def _restore(self) -> None:
        """Start a missing process when the pool is short and its retry is due (one caller at a
        time); then, with none left, refuse the call at once."""
        with self._lock:
            due = (len(self._live) < self.size and not self._restoring and time.monotonic() >= self._restore_at)
            self._restoring = self._restoring or due
        if due:
            try:
                self._start_one()
            finally:
                with self._lock:
                    self._restoring = False
        with self._lock:
            empty = not self._live and not self._restoring
        if empty:
            raise ScoringError(f"no scoring process is left ({self._short}); another is tried every "
                               f"{self.restore_every_s:g} s")

    def _call(self, method: str, example: Example, argument: Any) -> Any:
        if self._closed:
            raise ScoringError("the scoring processes were closed")
        self._restore()
        try:
            process = self._idle.get(timeout=self.wait_s)
        except queue.Empty:
            raise ScoringError(f"no scoring process was free within {self.wait_s:.0f} s") from None
        try:
            process.conn.send((method, example, argument))
            answered = process.conn.poll(self.timeout_s)
            reply = process.conn.recv() if answered else None
        except (EOFError, OSError):
            self._replace(process)
            raise ScoringError(f"the scoring process died during {method} "
                               f"(exit code {process.process.exitcode})") from None
        if reply is None:
            with self._lock:
                self.overruns += 1
            self._replace(process)
            raise ScoringOverrun(f"{method} ran past coordinator.scoring_timeout_s = {self.timeout_s:g} s; its "
                                 f"scoring process was replaced")
        self._idle.put(process)
        status, value = reply
        if status != "ok":
            raise ScoringError(value)
        return value
