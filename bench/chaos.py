"""Chaos: does a run survive workers killed at random, and is every prompt and lease accounted for?

    python bench/chaos.py [--quick] [--out DIR]

Two real ``echo2 train`` runs side by side, same config: **calm** (workers left alone) and
**chaos** (every ~``kill_every`` learner steps a random worker is killed with SIGKILL and restarted,
and once a worker is preempted with SIGTERM and restarted). Kills follow the learner's steps, not the
clock, and stop at half the run, so that each killed worker is declared dead (its heartbeat missed
for ``coordinator.heartbeat_timeout_s``) before the run ends, whatever the machine's speed. The workers are ``echo2 worker``
processes started here, as a user would on other machines. Reported per run, from the run's
reliability report: steps completed, wall time, prompts lost (drawn but neither trained,
buffered, queued nor out on a lease), groups trained twice, and the lease ledger
(issued = completed + expired + outstanding). ``wall_vs_calm`` is the price of the chaos.

The coordinator's books are checked against an independent count too: the groups the workers
logged as accepted (each worker's own log, one line per accepted submission) less the groups the
learner logged as trained (``metrics.jsonl``) must be what the coordinator still held or dropped
at the end (buffered, stale, from a quarantined worker): ``ledger_gap`` = 0. A worker SIGKILLed
between the coordinator's acceptance and its own log line would show as a negative gap.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import coordinator_endpoint, format_table, ledger, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402


class ChaosMonkey:
    """Starts ``count`` workers against the run in ``run_dir`` and, when ``kill_every`` is set, kills a
    random worker that has joined every ``kill_every`` (±25%) learner steps up to step ``last_kill``,
    and restarts it; the first kill is a SIGTERM (preemption), the others SIGKILL."""

    def __init__(self, run_dir: Path, count: int, kill_every: int | None, last_kill: int, seed: int = 0) -> None:
        self.run_dir, self.count, self.kill_every, self.last_kill = run_dir, count, kill_every, last_kill
        self.rng = random.Random(seed)
        self.processes: list[subprocess.Popen] = []
        self.kills = {"SIGKILL": 0, "SIGTERM": 0}
        self.starts = 0
        self.logs: dict[int, Path] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="chaos")

    def _start_worker(self, index: int, endpoint: dict) -> subprocess.Popen:
        self.starts += 1
        self.logs[index] = self.run_dir / f"chaos-worker-{index}-{self.starts}.log"
        log = self.logs[index].open("w")
        return subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", endpoint["url"],
                                 "--name", f"worker-{index}", "--threads", "1"],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ECHO2_TOKEN": endpoint["token"]})

    def _learner_step(self) -> int:
        """The last step the learner logged (0 before the first)."""
        metrics = self.run_dir / "metrics.jsonl"
        return max((row["step"] for row in read_jsonl(metrics) if "step" in row), default=0) if metrics.exists() else 0

    def _next_kill(self, after: int) -> int:
        return after + max(1, round(self.kill_every * self.rng.uniform(0.75, 1.25)))

    def _run(self) -> None:
        endpoint = coordinator_endpoint(self.run_dir, self.done)
        if endpoint is None:
            return
        self.processes = [self._start_worker(i, endpoint) for i in range(self.count)]
        if not self.kill_every:
            return
        kill_at = self._next_kill(0)
        while kill_at <= self.last_kill and not self.done.wait(0.2):
            # only workers that have joined: killing one still loading its model tests nothing
            joined = [i for i, log in self.logs.items() if "registered with" in log.read_text()]
            if not joined or self._learner_step() < kill_at:
                continue
            index = self.rng.choice(joined)
            how = signal.SIGTERM if self.kills["SIGTERM"] == 0 else signal.SIGKILL
            self.processes[index].send_signal(how)
            self.processes[index].wait(timeout=60)
            self.kills[how.name] += 1
            print(f"   chaos: {how.name} to worker-{index} at step {kill_at}; restarting it", flush=True)
            self.processes[index] = self._start_worker(index, endpoint)
            kill_at = self._next_kill(kill_at)

    def __enter__(self) -> ChaosMonkey:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=90)
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/chaos")
    steps, kill_every, workers = (40, 8, 3) if args.quick else (150, 15, 3)
    rows = []
    for name, every in (("calm", None), ("chaos", kill_every)):
        print(f"== {name}", flush=True)
        config = load_config(overrides=[
            f"run.steps={steps}", "workers.count=0", "eval.every=1000", "eval.size=100", "eval.show=0",
            "learner.groups_per_step=32", "rollout.groups_per_lease=8", f"run.dir={args.out / 'runs'}",
            f"run.name={name}", "telemetry.progress=false", "telemetry.tensorboard=false", "checkpoint.every=0",
            # a SIGKILLed worker is declared dead after 4 s and its leases re-issued
            "coordinator.heartbeat_timeout_s=4", "coordinator.lease_timeout_s=30",
        ])
        run_dir, group_size = Path(config.run.dir) / name, config.rollout.group_size
        with ChaosMonkey(run_dir, workers, every, last_kill=steps // 2) as monkey:
            summary = run_training(config)
        report = summary.reliability
        books = ledger(run_dir, list(run_dir.glob("chaos-worker-*.log")), report, group_size)
        rows.append({
            "run": name, "steps": summary.result.steps, "wall_s": summary.result.wall_seconds,
            "sigkill": monkey.kills["SIGKILL"], "sigterm": monkey.kills["SIGTERM"],
            "workers_dead": report["workers_dead"], "workers_left": report["workers_left"],
            "prompts_drawn": report["prompts_drawn"], "groups_trained": report["groups_trained"],
            "leases_issued": report["leases_issued"], "leases_completed": report["leases_completed"],
            "leases_expired": report["leases_expired"], "leases_outstanding": report["leases_outstanding"],
            "late_results_refused": report["groups_rejected"].get("expired_lease", 0), **books,
        })
    calm = rows[0]["wall_s"]
    for row in rows:
        row["wall_vs_calm"] = row["wall_s"] / calm
    columns = ["run", "steps", "wall_s", "wall_vs_calm", "sigkill", "sigterm", "workers_dead", "workers_left",
               "prompts_drawn", "prompts_lost", "trained_twice", "leases_issued", "leases_completed",
               "leases_expired", "leases_outstanding", "leases_unaccounted", "late_results_refused",
               "workers_logged_accepted", "learner_logged_trained", "coordinator_held", "ledger_gap"]
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"steps": steps, "kill_every_steps": kill_every, "workers": workers,
                                          "quick": args.quick})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
