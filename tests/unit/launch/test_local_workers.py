"""The local launcher restarts a worker that dies (bounded, with back-off) and leaves alone one that
finished: a request that crashed a worker process must not leave the run without its fleet."""

import subprocess
import sys

from waiting import wait_for

from echo2.launch import local
from echo2.launch.local import LocalWorkers
from echo2.rollout.options import EXIT_TURNED_AWAY, WorkerOptions


def _workers(tmp_path, monkeypatch, exit_codes: list[int]) -> tuple[LocalWorkers, list[int]]:
    """Workers whose processes exit at once with ``exit_codes`` (one per worker); the spawns, by worker index."""
    options = [WorkerOptions(coordinator="http://127.0.0.1:9", token="t", name=f"w{i}") for i in range(len(exit_codes))]
    workers, spawned = LocalWorkers(options, tmp_path), []

    def spawn(option: WorkerOptions) -> subprocess.Popen:
        index = int(option.name[1:])
        spawned.append(index)
        return subprocess.Popen([sys.executable, "-c", f"raise SystemExit({exit_codes[index]})"])

    monkeypatch.setattr(workers, "_spawn", spawn)
    monkeypatch.setattr(local, "FIRST_RESTART_S", 0.05)
    return workers, spawned


def test_a_dead_local_worker_is_restarted_with_back_off_until_its_budget_and_a_finished_one_is_not(tmp_path, monkeypatch):
    """Exit 0 (the run is over for it) and :data:`EXIT_TURNED_AWAY` (quarantined: it would come back
    under a new identity) are left alone; any other exit is restarted."""
    workers, spawned = _workers(tmp_path, monkeypatch, [0, EXIT_TURNED_AWAY, 5])
    workers.start()
    workers.supervise(every_s=0.02)
    try:
        wait_for(lambda: workers.restarted_total == local.MAX_RESTARTS, timeout_s=20, what="the restarts")
        wait_for(lambda: all(p.poll() is not None for p in workers.processes), timeout_s=5, what="the last one to exit")
        assert spawned.count(0) == spawned.count(1) == 1
        assert spawned.count(2) == 1 + local.MAX_RESTARTS and workers.restarts == [0, 0, local.MAX_RESTARTS]
    finally:
        workers.stop(timeout_s=1)
    assert workers.restarted_total == local.MAX_RESTARTS  # and no more once its budget is spent


def test_a_worker_killed_by_a_signal_counts_as_dead(tmp_path, monkeypatch):
    workers, spawned = _workers(tmp_path, monkeypatch, [0])
    workers.start()
    workers.processes[0] = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    workers.supervise(every_s=0.02)
    try:
        wait_for(lambda: workers.restarted_total == 1, timeout_s=10, what="the restart")
    finally:
        workers.stop(timeout_s=1)
