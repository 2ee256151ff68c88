"""Start rollout workers as local subprocesses (the default launcher).

Each worker is the same ``echo2 worker`` program a user would start by hand on another machine;
here it only happens to reach the coordinator over loopback.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

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
    def __init__(self, url: str, token: str, count: int, threads: int, log_dir: Path,
                 extra_args: list[list[str]] | None = None) -> None:
        """``extra_args[i]``: further ``echo2 worker`` options for worker ``i`` (relay, price, speed)."""
        self.url, self.token, self.count, self.threads, self.log_dir = url, token, count, threads, log_dir
        self.extra_args = extra_args or [[] for _ in range(count)]
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "TOKENIZERS_PARALLELISM": "false"}
        for index in range(self.count):
            name = f"local-{index}"
            with (self.log_dir / f"{name}.log").open("a") as log_file:  # a resumed run appends
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "echo2.cli", "worker", "--coordinator", self.url, f"--token={self.token}",
                     "--name", name, "--threads", str(self.threads), *self.extra_args[index]],
                    stdout=log_file, stderr=subprocess.STDOUT, env=env, preexec_fn=_terminate_with_parent,
                ))
        log.info("started %d local workers (logs in %s)", self.count, self.log_dir)

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
