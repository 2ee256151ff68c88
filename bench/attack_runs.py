"""The bench's side of the attack runs: which attacks exist, the observer wrapped around the
learner and coordinator in this process, the attacker processes, and one finished run
(:class:`Outcome`) as the rows read it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))

from attackers.session import TOKEN_ENV
from common import coordinator_endpoint


@dataclass(frozen=True)
class Attack:
    row: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"attacker-{self.kind.replace('_', '-')}"


ROWS = {
    "fabricate": "1 fabricated, claims current v",
    "late_cheater": "1b fabricates after honest start",
    "fabricate_old": "2 fabricated, claims v-1",
    "reward": "3 reward field",
    "replay": "4 replays honest groups",
    "duplicate": "5 lease submitted 3x",
    "late_lease": "6 result after expiry",
    "relay": "7 corrupt/substitute relay",
    "oversize": "8 oversize + chunked bodies",
    "flood": "9 200 registrations",
    "slowloris": "10 slow-loris",
    "sybil_fabricate": "11 quarantine amplification",
    "poison_logprob": "12 one poisoned log-prob",
    "hoarder": "13 lease hoarder",
    "telemetry": "14 telemetry + name poison",
    "resume_claim": "15 claims v-1 after a resume",
    "chooser": "25 samples from its own randomness",
    "repeater": "26 one answer G times",
    "cherry_picker": "27 picks G of 2G tries",
    # availability (--availability): each alone in its run, steps/s against avail-clean
    "trickle_relay": "16 trickling relay (1 B/s)",
    "silent_relay": "17 silent relay",
    "recycled_hoarders": "18 recycled hoarders",
    "hoarding_swarm": "19 hoarding swarm",
    "fabricating_swarm": "20 fabricating swarm",
    "longpoll_flood": "21 100 long-polls, one identity",
    "heartbeat_flood": "22 heartbeat flood",
    "events_flood": "23 timeline events flood",
    "wide_interval": "24 a +-86,000 s interval",
    "call_flood": "28 100 calls at once on one episode key",
    "call_chooser": "29 samples an agent's calls from its own randomness",
    "probe": "heartbeat probe",
}
AVAILABILITY_KINDS = ("trickle_relay", "silent_relay", "recycled_hoarders", "hoarding_swarm", "fabricating_swarm",
                      "longpoll_flood", "heartbeat_flood", "events_flood", "wide_interval", "call_flood")
CHOOSING_KINDS = ("chooser", "repeater", "cherry_picker")
"""Real samples of the policy with their true log-probs, chosen rather than drawn from the lease's
randomness (:mod:`echo2.model.draws`): only the draw check catches them."""
AUDIT_KINDS = ("fabricate", "late_cheater", "fabricate_old", "replay", *CHOOSING_KINDS)
ENGINE_KINDS = ("reward", "duplicate", "late_cheater", "poison_logprob", "call_chooser", *CHOOSING_KINDS)
"""Attackers that run a real RolloutWorker and sample honestly (some of the time): their rows count
their trained groups, so the learner's first step waits for each one to register."""


#: The heartbeat probe's worker name (:func:`attackers.availability.probe_heartbeats`).
PROBE_NAME = "attacker-probe"


def attack(kind: str, **params: Any) -> Attack:
    count = f" ({params['count']})" if kind in ("recycled_hoarders", "hoarding_swarm", "fabricating_swarm") else ""
    return Attack(ROWS[kind] + count, kind, params)


class Observer:
    """Wraps seven methods in this process (see ``bench/attacks.py``'s docstring); what they did is
    unchanged but for the heartbeat probe, which is taken for a worker that has delivered."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, score: Any) -> None:
        self.trained: list[dict[str, Any]] = []
        self.accepted: list[dict[str, Any]] = []
        self.quarantines: list[dict[str, Any]] = []
        self.audited: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.states: list[Any] = []
        self.score = score
        self.before_first_batch: Callable[[], None] = lambda: None

    def install(self) -> None:
        from echo2.coordinator.membership import Membership
        from echo2.coordinator.state import CoordinatorState
        from echo2.coordinator.work import WorkDesk
        from echo2.gateway.episodes import EpisodeBook
        from echo2.learner.loop import LearnerLoop
        from echo2.learner.verification import Verifier
        from echo2.protocol import Completion

        observer = self
        init, quarantine, batch = CoordinatorState.__init__, Membership.quarantine, LearnerLoop._batch
        register = Membership.register
        submit, gaps, record_call = WorkDesk.submit, Verifier._gaps, EpisodeBook.record

        def observed_init(state, *args, **kwargs):
            init(state, *args, **kwargs)
            observer.states.append(state)  # a run restarted with --resume has two

        def observed_quarantine(members, worker_id, reason, taken=()):
            already = members.parts.registry.workers[worker_id].quarantined
            discarded = quarantine(members, worker_id, reason, taken)
            if not already:
                observer.quarantines.append({"t": time.time(), "worker_id": worker_id, "reason": reason,
                                             "discarded": discarded})
            return discarded

        def observed_submit(work, record, request):
            reply = submit(work, record, request)
            if reply.accepted and not reply.duplicate:
                observer.accepted.append({"t": time.time(), "worker_id": record.worker_id,
                                          "slots": [g.slot for g in request.groups]})
            return reply

        def observed_batch(loop, step):
            waiting, observer.before_first_batch = observer.before_first_batch, lambda: None
            waiting()
            groups, filtered, counts = batch(loop, step)
            now = time.time()
            for g in groups:
                completions = [Completion(token_ids=t, logprobs=lp) for t, lp in zip(g.token_ids, g.logprobs)]
                truth = observer.score(g.example, completions, lambda replies: None)
                observer.trained.append({
                    "t": now, "step": step, "worker_id": g.worker_id, "workers": g.workers(), "slot": g.slot,
                    "version": g.version,
                    "reward_mean": sum(g.rewards) / len(g.rewards), "rewards_match": truth == list(g.rewards),
                    "audit_rate": loop.verifier.rates.rate(g.worker_id)})
            return groups, filtered, counts

        def observed_gaps(verifier, model, pieces, version):
            found = gaps(verifier, model, pieces, version)  # per (group, worker): an agent's group has a worker per call
            observer.audited += [{"t": time.time(), "worker_id": worker, "slot": g.slot, "version": version,
                                  "gap": gap, "worst_token_gap": worst, "draw_gap": drawn}
                                 for (g, worker), (gap, worst, _, drawn) in zip(pieces, found)]
            return found

        def observed_call(book, episode, call, worker_id, held):
            observer.calls.append({"t": time.time(), "worker_id": worker_id})  # its answer goes back to the agent
            return record_call(book, episode, call, worker_id, held)

        Verifier._gaps = observed_gaps
        EpisodeBook.record = observed_call
        CoordinatorState.__init__ = observed_init
        def observed_register(members, name, *args, **kwargs):
            record = register(members, name, *args, **kwargs)
            if name == PROBE_NAME:  # the probe times what a delivering worker's heartbeats take, not a newcomer's
                record.proven = True
            return record

        Membership.quarantine = observed_quarantine  # the learner's give_back and the app's calls alike
        Membership.register = observed_register
        WorkDesk.submit = observed_submit
        LearnerLoop._batch = observed_batch


OBSERVER = Observer()


class Attackers:
    """Starts one child process per attack once the run's coordinator is up (each child then
    waits for training to begin); holds the learner's first step until each has begun
    (:meth:`wait_until_begun`); stops the stragglers when the run is over."""

    def __init__(self, run_dir: Path, attacks: list[Attack]) -> None:
        self.run_dir, self.attacks = run_dir, attacks
        self.processes: list[subprocess.Popen] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._start, daemon=True, name="attackers")

    def _start(self) -> None:
        endpoint = coordinator_endpoint(self.run_dir, self.done)
        if endpoint is None:
            return
        folder = self.run_dir / "attackers"
        folder.mkdir(exist_ok=True)
        for spec in self.attacks:
            with (folder / f"{spec.name}.out").open("w") as out:
                self.processes.append(subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("attacks.py")), "--attacker", "--kind", spec.kind, "--name", spec.name,
                     "--coordinator", endpoint["url"], "--run-dir", str(self.run_dir),
                     "--log", str(folder / f"{spec.name}.jsonl"), "--params", json.dumps(spec.params)],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=spec.kind in AVAILABILITY_KINDS,
                    env={**os.environ, TOKEN_ENV: endpoint["token"], "OMP_NUM_THREADS": "1",
                         "TOKENIZERS_PARALLELISM": "false"}))

    def wait_until_begun(self, timeout_s: float = 120.0) -> None:
        """Until each attacker has logged its start, and each of :data:`ENGINE_KINDS` its
        registration (its model loaded), or ``timeout_s`` (then the rows say what it did not do).
        Why: a quick run's 60 steps take ~10 s on a fast machine, about what an engine attacker
        needs to load its model, and the duplicate row once had no group of its trained. Not its
        first submission: while the learner waits, the honest workers fill the window and nobody
        else is granted a lease."""
        deadline, folder = time.monotonic() + timeout_s, self.run_dir / "attackers"
        for spec in self.attacks:
            wanted = "registered" if spec.kind in ENGINE_KINDS else "start"
            log = folder / f"{spec.name}.jsonl"
            while time.monotonic() < deadline and not (
                    log.exists() and any(json.loads(line)["event"] == wanted for line in log.read_text().splitlines())):
                time.sleep(0.2)

    def __enter__(self) -> Attackers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)
        deadline = time.monotonic() + 30
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@dataclass
class Outcome:
    """One finished run, as the rows read it."""

    name: str
    run_dir: Path
    steps: int
    final_accuracy: float
    step_s: float
    last_step_t: float
    reliability: dict[str, Any]
    trained: list[dict[str, Any]]
    accepted: list[dict[str, Any]]
    quarantines: list[dict[str, Any]]
    audited: list[dict[str, Any]]
    """Every group an audit re-scored: worker id, slot, the version it was audited at, its gap."""
    calls: list[dict[str, Any]]
    """Every agent call a worker answered (an agent run's): when, and which worker."""
    workers: dict[str, str]  # worker id -> name
    train_log: str
    attacks: list[Attack]
    records: list[dict[str, Any]]
    """The run's metrics.jsonl."""
    wall_s: float
    """The learner loop's wall time (first step to last)."""
    honest_parked: list[str] = field(default_factory=list)
    """The honest (local) workers parked when the run ended: by activation or for their misses."""

    def events(self, attack: Attack, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.run_dir / "attackers" / f"{attack.name}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r for r in records if kind is None or r["event"] == kind]

    def worker_id(self, attack: Attack) -> str | None:
        return next((wid for wid, name in self.workers.items() if name == attack.name), None)

    def quarantine(self, worker_id: str | None) -> dict[str, Any] | None:
        return next((q for q in self.quarantines if q["worker_id"] == worker_id), None)

    def trained_by(self, worker_id: str | None) -> list[dict[str, Any]]:
        return [g for g in self.trained if g["worker_id"] == worker_id]

    def per_worker(self) -> dict[str, dict[str, int]]:
        """Groups each worker had accepted and trained (the 200 Sybils of a flood as one line)."""
        def who(worker_id: str) -> str:
            name = self.workers.get(worker_id, worker_id)
            return "sybil-*" if name.startswith("sybil-") else name

        table: dict[str, dict[str, int]] = {}
        for worker_id in self.workers:
            table.setdefault(who(worker_id), {"accepted": 0, "trained": 0})
        for a in self.accepted:
            table[who(a["worker_id"])]["accepted"] += len(a["slots"])
        for g in self.trained:
            table[who(g["worker_id"])]["trained"] += 1
        return table

    def attacker_ids(self) -> set[str]:
        """Every worker id an attacker process registered (by role: what it logged, not its name)."""
        ids: set[str] = set()
        for attack in self.attacks:
            for event in self.events(attack):
                ids.update([event["worker_id"]] if "worker_id" in event else event.get("worker_ids", []))
        return ids

    def honest_quarantined(self) -> list[str]:
        attackers = self.attacker_ids()
        return [self.workers.get(q["worker_id"], q["worker_id"]) for q in self.quarantines
                if q["worker_id"] not in attackers]


def stop_at(run_dir: Path, version: int, timeout_s: float = 1800.0) -> None:
    """SIGTERM this process (a preempted learner) once the run has logged training ``version``."""
    from echo2.telemetry.metrics import read_jsonl

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.exists() and any("loss" in r and r["version"] >= version for r in read_jsonl(path)):
            os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(0.2)


def run_once(name: str, attacks: list[Attack], steps: int, out: Path, extra: list[str],
             restart_at: int | None = None) -> Outcome:
    """Train ``steps`` with ``attacks`` joining; ``restart_at``: SIGTERM the learner there (it
    checkpoints at the step's end, its leases in flight lost) and continue to ``steps`` with
    ``--resume``, as ``echo2 train --resume`` would."""
    from echo2.config import load_config
    from echo2.launch.agents import is_agent_run
    from echo2.launch.train import run_training
    from echo2.launch.work import reward_scorer
    from echo2.learner import interrupts
    from echo2.tasks import load_task
    from echo2.telemetry.metrics import read_jsonl

    print(f"== {name}: {', '.join(a.name for a in attacks) or 'no attackers'}"
          f"{f' (restarted at step {restart_at})' if restart_at else ''}", flush=True)
    config = load_config(overrides=[
        f"run.steps={steps}", "workers.count=2", "eval.every=1000", "eval.size=100", "eval.show=0",
        "learner.groups_per_step=8", "rollout.groups_per_lease=4", f"run.dir={out / 'runs'}", f"run.name={name}",
        "telemetry.progress=false", "telemetry.tensorboard=false", "checkpoint.every=0",
        "coordinator.data_timeout_s=180", "activation.enabled=false", *extra,
    ])
    run_dir = Path(config.run.dir) / name
    if run_dir.exists():  # an earlier invocation's run of the same name, under this bench's --out
        shutil.rmtree(run_dir)
    task_name = config.agent.examples if is_agent_run(config) else config.task.name  # an agent run's examples
    OBSERVER.reset(reward_scorer(load_task(task_name, config.task.options), config.model.name))
    with Attackers(run_dir, attacks) as attackers:
        OBSERVER.before_first_batch = attackers.wait_until_begun
        if restart_at:
            interrupts.install()
            threading.Thread(target=stop_at, args=(run_dir, restart_at), daemon=True, name="preempt").start()
            assert run_training(config).result.interrupted, f"the learner was not stopped at step {restart_at}"
        summary = run_training(config, resume_dir=run_dir if restart_at else None)
    records = read_jsonl(run_dir / "metrics.jsonl")
    step_times = [r["time"] for r in records if "loss" in r]
    gaps = [b - a for a, b in zip(step_times, step_times[1:])]
    workers = {wid: record.name for state in OBSERVER.states for wid, record in state.registry.workers.items()}
    now = time.monotonic()
    parked = [record.name for record in OBSERVER.states[-1].registry.records() if record.name.startswith("local-")
              and record.alive and (not record.active or record.parked_until > now)]
    return Outcome(name=name, run_dir=run_dir, steps=summary.result.steps,
                   final_accuracy=summary.result.evals[-1][1].accuracy,
                   step_s=statistics.median(gaps) if gaps else float("nan"), last_step_t=step_times[-1],
                   reliability=summary.reliability,
                   trained=list(OBSERVER.trained), accepted=list(OBSERVER.accepted),
                   quarantines=list(OBSERVER.quarantines), audited=list(OBSERVER.audited),
                   calls=list(OBSERVER.calls), workers=workers,
                   train_log=(run_dir / "train.log").read_text(), attacks=attacks, records=records,
                   wall_s=summary.result.wall_seconds, honest_parked=parked)
