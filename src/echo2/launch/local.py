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
from pathlib import Path

from echo2.model.loading import pin_cpus
from echo2.rollout.options import OPTIONS_ENV, TOKEN_ENV, WorkerOptions

log = logging.getLogger("echo2")

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _terminate_with_parent() -> None:
    """Linux: a local worker gets SIGTERM when the learner process dies, even by SIGKILL, instead
    of outliving it (``echo2 train --resume`` starts its own). Remote workers are not affected:
    they keep retrying and rejoin the resumed run."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalWorkers:
    def __init__(self, options: list[WorkerOptions], log_dir: Path, cpus: list[int] | None = None) -> None:
        """One subprocess per entry of ``options`` (a worker without a name is called ``local-<i>``),
        each restricted to ``cpus`` (None: the CPUs this process has)."""
        self.options = [o if o.name else o.model_copy(update={"name": f"local-{i}"}) for i, o in enumerate(options)]
        self.count, self.log_dir, self.cpus = len(self.options), log_dir, cpus
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for options in self.options:
            env = {**os.environ, "OMP_NUM_THREADS": str(options.threads), "TOKENIZERS_PARALLELISM": "false",
                   OPTIONS_ENV: options.secret_json()}
            env.pop(TOKEN_ENV, None)  # the run's token is in the options; not one the learner's shell had
            with (self.log_dir / f"{options.name}.log").open("a") as log_file:  # a resumed run appends
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "echo2.cli", "worker", "--name", options.name],
                    stdout=log_file, stderr=subprocess.STDOUT, env=env, preexec_fn=self._prepare_child,
                ))
        log.info("started %d local workers (logs in %s)", self.count, self.log_dir)

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
        for process in self.processes:
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
