"""Start rollout workers as local subprocesses (the default launcher).

Each worker is the same ``echo2 worker`` program a user would start by hand on another machine;
here it only happens to reach the coordinator over loopback. Its options, run token included,
travel as JSON in its environment (``$ECHO2_WORKER_OPTIONS``, readable only by its owner and root
under ``/proc/PID/environ``), never on its command line (readable by every user through ``ps``):
the command line is ``python -m echo2.cli worker --name NAME``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from echo2.model.loading import pin_cpus
from echo2.rollout.options import EXIT_TURNED_AWAY, OPTIONS_ENV, TOKEN_ENV, WorkerOptions

log = logging.getLogger("echo2")

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _terminate_with_parent() -> None:
    """Linux: a local worker gets SIGTERM when the learner process dies, even by SIGKILL, instead
    of outliving it (``echo2 train --resume`` starts its own). Remote workers are not affected:
    they keep retrying and rejoin the resumed run."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


#: Restarts of one local worker that died, at most (then it stays down, said in the log).
MAX_RESTARTS = 5
#: Seconds before the first restart of a worker that died; doubled for each restart after it.
FIRST_RESTART_S = 1.0
#: A worker that ran this long since its last (re)start has its back-off start over.
STEADY_S = 300.0


class LocalWorkers:
    def __init__(self, options: list[WorkerOptions], log_dir: Path, cpus: list[int] | None = None) -> None:
        """One subprocess per entry of ``options`` (a worker without a name is called ``local-<i>``),
        each restricted to ``cpus`` (None: the CPUs this process has)."""
        self.options = [o if o.name else o.model_copy(update={"name": f"local-{i}"}) for i, o in enumerate(options)]
        self.count, self.log_dir, self.cpus = len(self.options), log_dir, cpus
        self.processes: list[subprocess.Popen] = []
        self.restarts = [0] * self.count
        """Restarts of each worker since it last ran steadily (:data:`STEADY_S`)."""
        self.restarted_total = 0
        self._started_at = [0.0] * self.count
        self._stopping = threading.Event()

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes = [self._spawn(options) for options in self.options]
        self._started_at = [time.monotonic()] * self.count
        log.info("started %d local workers (logs in %s)", self.count, self.log_dir)

    def _spawn(self, options: WorkerOptions) -> subprocess.Popen:
        env = {**os.environ, "OMP_NUM_THREADS": str(options.threads), "TOKENIZERS_PARALLELISM": "false",
               OPTIONS_ENV: options.secret_json()}
        env.pop(TOKEN_ENV, None)  # the run's token is in the options; not one the learner's shell had
        with (self.log_dir / f"{options.name}.log").open("a") as log_file:  # a resumed run appends
            return subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--name", options.name],
                                    stdout=log_file, stderr=subprocess.STDOUT, env=env, preexec_fn=self._prepare_child)

    def supervise(self, every_s: float = 0.5) -> None:
        """From now on (the workers have started up), restart a local worker that dies (an exit
        with an error, or a signal) until :meth:`stop`: after :data:`FIRST_RESTART_S`, doubled for
        each restart, at most :data:`MAX_RESTARTS` in a row. A worker that leaves by itself (exit
        0: the run is over) or that the coordinator turned away (:data:`EXIT_TURNED_AWAY`:
        quarantined) is not restarted. Remote workers are their owners' to restart."""
        threading.Thread(target=self._watch, args=(every_s,), daemon=True, name="echo2-local-workers").start()

    def _watch(self, every_s: float) -> None:
        due: dict[int, float] = {}
        while not self._stopping.wait(every_s):
            now = time.monotonic()
            for index, process in enumerate(self.processes):
                code = process.poll()
                if code in (None, 0, EXIT_TURNED_AWAY) or self._stopping.is_set():
                    continue
                if index not in due:
                    if now - self._started_at[index] > STEADY_S:
                        self.restarts[index] = 0
                    if self.restarts[index] >= MAX_RESTARTS:
                        continue
                    due[index] = now + FIRST_RESTART_S * 2 ** self.restarts[index]
                    log.warning("local worker %s exited (%s); restarting it in %.0f s (restart %d of %d; see %s)",
                                self.options[index].name, _exit_status(code), due[index] - now,
                                self.restarts[index] + 1, MAX_RESTARTS, self.log_dir / f"{self.options[index].name}.log")
                elif now >= due[index]:
                    del due[index]
                    self.restarts[index] += 1
                    self.restarted_total += 1
                    self.processes[index] = self._spawn(self.options[index])
                    self._started_at[index] = now

    def _prepare_child(self) -> None:
        """In the child, before it runs the worker program."""
        _terminate_with_parent()
        pin_cpus(self.cpus)

    def check(self) -> None:
        """Raise if a local worker exited with an error while starting up."""
        failed = [i for i, p in enumerate(self.processes) if p.poll() not in (None, 0)]
        if failed:
            raise RuntimeError(f"local worker(s) {failed} exited with errors; see {self.log_dir}")

    def stop(self, timeout_s: float = 15.0) -> None:
        """Workers leave by themselves once the coordinator says stop; terminate stragglers."""
        self._stopping.set()
        for process in self.processes:
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()


def _exit_status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
