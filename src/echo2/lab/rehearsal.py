"""An echo2 run across lab hosts: the learner (with its coordinator) in one host, workers started
by hand in others, as on real machines (``echo2 train`` and ``echo2 worker`` command lines).

Tests and benchmarks drive partitions and NAT with it; docs/wan.md shows the same by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from echo2.lab.network import Lab


class LabRun:
    """``echo2 train`` inside ``learner_host`` (no local workers; its coordinator on the host's own
    address), writing ``run_dir``; :meth:`worker` starts ``echo2 worker`` inside another host."""

    def __init__(self, lab: Lab, learner_host: str, run_dir: Path, overrides: list[str],
                 env: dict[str, str] | None = None) -> None:
        """``env``: the processes' environment (default: this one's)."""
        self.lab, self.learner_host, self.run_dir, self.overrides = lab, learner_host, run_dir, overrides
        self.env = env
        self.logs = run_dir.parent / f"{run_dir.name}-processes"
        self.learner: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.url = ""

    def start(self, timeout_s: float = 120.0) -> LabRun:
        """Start the learner; return once its coordinator answers (its address in ``coordinator.json``)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "echo2.cli", "train", f"run.dir={self.run_dir.parent}",
                   f"run.name={self.run_dir.name}", "workers.count=0",
                   f"coordinator.host={self.lab.own_address(self.learner_host)}", *self.overrides]
        with (self.logs / "learner.log").open("w") as log:
            self.learner = self.lab.popen(self.learner_host, command, stdout=log, stderr=subprocess.STDOUT,
                                          env=self.env)
        saved, deadline = self.run_dir / "coordinator.json", time.monotonic() + timeout_s
        while not saved.exists():
            if self.learner.poll() is not None:
                raise RuntimeError(f"the learner exited ({self.learner.returncode}) before its coordinator started: "
                                   f"see {self.logs / 'learner.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the learner's coordinator did not start within {timeout_s:.0f}s")
            time.sleep(0.2)
        self.url = json.loads(saved.read_text())["url"]
        return self

    def worker(self, host: str, name: str, *extra: str, relay: bool = True) -> subprocess.Popen:
        """``echo2 worker`` inside ``host``, its relay (if any) on all its interfaces, advertised at the
        address the host itself holds (behind NAT a private one, which the coordinator's check refuses)."""
        command = [sys.executable, "-m", "echo2.cli", "worker", "--coordinator", self.url, "--token-file",
                   str(self.run_dir / "token"), "--name", name, "--threads", "1", *extra]
        command += ["--relay-host", "0.0.0.0", "--advertise-host", self.lab.own_address(host)] if relay \
            else ["--no-relay"]
        with (self.logs / f"{name}.log").open("w") as log:
            self.workers[name] = self.lab.popen(host, command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self.workers[name]

    def worker_log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_for_worker_line(self, name: str, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in worker ``name``'s log, once it is there: a TimeoutError
        if it is not within ``timeout_s``, a RuntimeError if the worker or the learner exits first."""
        deadline = time.monotonic() + timeout_s
        while (match := re.search(pattern, self.worker_log(name))) is None:
            exited = [p for p in (self.workers[name], self.learner) if p is not None and p.poll() is not None]
            if exited:
                raise RuntimeError(f"{name}'s log has no {pattern!r} and a process of the run exited: see {self.logs}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}'s log has no {pattern!r} after {timeout_s:.0f}s: see {self.logs}")
            time.sleep(0.2)
        return match

    def wait(self, timeout_s: float) -> int:
        """The learner's exit status once the run is over (TimeoutError if it is not by then)."""
        assert self.learner is not None, "start() first"
        try:
            return self.learner.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"the run did not finish within {timeout_s:.0f}s: see {self.logs}") from None

    def close(self) -> None:
        """Stop every process of the run still going (workers get 15 s to leave on their own)."""
        processes = [p for p in (self.learner, *self.workers.values()) if p is not None]
        deadline = time.monotonic() + 15
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def __enter__(self) -> LabRun:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
