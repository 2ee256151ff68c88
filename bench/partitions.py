"""Partitions: hosts cut off without a word during a real run. Does every process notice within
its timeout, come back after the heal, and do the books hold?

    python bench/partitions.py [--quick] [--out DIR]     (root: it builds a network lab, docs/wan.md)

One real run on the network lab (:mod:`echo2.lab`): the learner on its own host, three workers
started by hand (``echo2 worker``) on three more, every link shaped by the kernel to
:data:`LINK_MBPS` both ways and the shipped model sent whole (``broadcast.encoding=full``), so that
a version takes a few seconds to cross one link: long enough to be cut mid-download. The relays of
``r2`` and ``r3`` are capped below the link (:data:`UPLOAD_CAP`), so the plan is the same tree
each version: ``r1`` fetches from the learner and relays to ``r2`` and ``r3`` (``fan_out=2``). The cases, one after the
other, each a blackhole (packets dropped silently: a NAT that timed out, a cloud firewall) held
for ``outage_s`` — longer than every timeout that applies — then healed:

1. ``mid_lease``: ``r2`` cut off from every host while it works (generating, or fetching the next
   version to generate with). Detected when the coordinator declares it dead (``coordinator.heartbeat_timeout_s``;
   its lease expires with it); recovered once it has registered again and loaded a version after
   the heal (``at_work_s``: its first accepted lease after the heal, which depends on the window as
   well: r2 and r3 get each version through r1 some 8-12 s after it is published, about the
   window's length at S=2, so most of their versions arrive too old for a lease; a few minutes at
   worst);
2. ``learner_download``: ``r1`` cut off from the learner one second after a version is
   published, mid-download (star-free: the learner is its only source). Detected when its download
   stalls (``broadcast.stall_s``), or, when it had not started that download yet (it hears of a
   version at its next heartbeat or lease answer, which the cut then stops), when it finds the
   coordinator out of reach; recovered at its first complete version after the heal;
3. ``relay_download``: ``r3`` cut off from its relay ``r1`` one second after a publish. Detected
   when it moves on to the next source of its chain (``broadcast.stall_s``); recovered when that
   version completes from the learner: before the heal, which it does not need (negative). Its
   next fetches skip ``r1`` for 30 s (a relay out of reach lately, :mod:`echo2.broadcast.suspects`),
   so they do not spend the stall budget on it again;
4. ``relay_serving``: ``r1`` cut off from every host one second after a publish, while it relays
   to ``r2`` and ``r3``. Detected when the last of them moves on (``broadcast.stall_s``), or
   skips ``r1`` from the start (``r3`` does when case 3's cut is less than 30 s old);
   recovered when the last of them completes a version after the cut (from the learner: before
   the heal, negative);
5. ``learner_all``: the learner's host cut off from every worker. Detected when the last worker
   says it cannot reach the coordinator (HTTP connect 5 s, read 30 s) and the coordinator has
   declared them all dead; recovered at the learner's first step after the heal. The full run
   holds it for 180 s: a worker used to give up after 120 s of retries and exit for good.

Cost-aware activation is off (``activation.enabled=false``): every worker stays at work, so a
worker's return after a heal is the partition's doing, not a parking decision (with it on, the
three equally priced workers were parked and activated by turns, and one re-run measured r3's
first lease after ``relay_download``'s heal at 315 s: it had been parked throughout).

The relay cases cut into the tree only once it is there: each waits until the workers it cuts
from ``r1`` have loaded a version from ``r1`` since the case began (a worker that registered anew,
or whose relay was declared dead, is fed by someone else for a few versions), and says so in a
clear error if that does not happen within :data:`TREE_WAIT_S`.

Columns: ``detected_s`` from the cut, ``recovered_s`` from the heal (negative: before it, by a
fallback), ``at_work_s`` (the cut worker's first accepted lease after the heal), the timeout that
applies, whether the learner said why it waited (case 5), and, for
the whole run (the same in every row): prompts lost, groups trained twice, the independent
ledger gap (the groups the workers logged as accepted, less the groups the learner trained,
less what the coordinator held or dropped: 0) and whether the run went on to a clean stop. Log
times have millisecond resolution (train.log and the workers' logs).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, ledger, parse_args, wait_until, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.lab import HostSpec, Lab  # noqa: E402
from echo2.lab.rehearsal import LabRun  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

LINK_MBPS = 4.0
#: Each worker's relay upload cap (Mbit/s, echo2's own throttle, under the kernel's LINK_MBPS for r2
#: and r3): relays report what they measure, equal links measure alike, and the plan would reorder
#: them at random; with these the plan is the same tree every version: r1 at the head, r2, r3 below.
UPLOAD_CAP = {"r1": LINK_MBPS, "r2": LINK_MBPS / 2, "r3": LINK_MBPS / 4}
TIMEOUTS = ["coordinator.heartbeat_timeout_s=8", "coordinator.lease_timeout_s=15", "broadcast.stall_s=4",
            "coordinator.data_timeout_s=900"]
RUN = ["run.steps=100000", "learner.groups_per_step=8", "rollout.groups_per_lease=4", "staleness=2",
       "eval.every=100000", "eval.size=20", "eval.show=0", "telemetry.tensorboard=false", "checkpoint.every=0",
       "broadcast.encoding=full", "broadcast.mode=pipelined", "broadcast.fan_out=2", "activation.enabled=false",
       *TIMEOUTS]
WORKER_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) (.*)$")
LEARNER_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (.*)$")


@dataclass(frozen=True)
class Case:
    name: str
    host: str
    peer: str | None
    after_publish: bool
    """Cut one second after a version is published (mid-download), else at once."""
    timeout: str
    detect: list[tuple[str, str]]
    """(log, pattern) pairs: detected once each has a match after the cut (the last of them); for a
    cut after a publish, from that publish on (a worker whose fetch of the version skipped the
    host from its start, a moment before the cut, was never held up by it: 0 s)."""
    recover: list[tuple[str, str]] | None
    """(log, pattern) pairs: recovered once each has a match after the cut (the last of them);
    None: at the learner's first step after the heal."""
    fed_by_r1: tuple[str, ...] = ()
    """Workers that must have loaded a version from ``r1`` since the case began before it cuts."""


R1 = r"http://10\.77\.2\.2:\d+"  # r1's relay: the second host of the lab
LOADED = r"v\d+: \d+ chunks in"
LOADED_FROM_R1 = rf"v\d+: \d+ chunks in \S+ \(.*from {R1}"
#: Seconds a relay case waits for the tree it cuts into (a worker loads a version every 5-20 s).
TREE_WAIT_S = 180
STALL = "broadcast.stall_s=4 (+ the 2 s long poll)"
#: A worker leaves r1 for the next source of its chain: it moves on mid-fetch, or it skips r1 from
#: the start of a fetch (a relay it could not reach within the last 30 s, an earlier case's cut
#: included: such a worker is not held up by the new cut at all)
LEFT_R1 = rf"from {R1}: .*moving on to|skipping {R1}"
CASES = [
    Case("mid_lease", "r2", None, False, "coordinator.heartbeat_timeout_s=8 (lease_timeout_s=15)",
         [("learner", r"worker r2 silent for \S+: declared dead")], [("r2", r"registered again"), ("r2", LOADED)]),
    Case("learner_download", "r1", "learner", True, f"{STALL}, or the coordinator's connect timeout (5 s)",
         [("r1", r"chunk \d+ from \S+: |fetch(ing)? .*failed|cannot reach the coordinator")], [("r1", LOADED)]),
    Case("relay_download", "r3", "r1", True, STALL, [("r3", LEFT_R1)], [("r3", LOADED)], fed_by_r1=("r3",)),
    Case("relay_serving", "r1", None, True, STALL, [("r2", LEFT_R1), ("r3", LEFT_R1)],
         [("r2", LOADED), ("r3", LOADED)], fed_by_r1=("r2", "r3")),
    Case("learner_all", "learner", None, False, "a heartbeat's 8 s; coordinator.heartbeat_timeout_s=8",
         [(w, r"cannot reach the coordinator") for w in UPLOAD_CAP] + [("learner", r"worker r3 silent for")], None),
]


class Logs:
    """Timestamped lines of the learner's train.log and each worker's log."""

    def __init__(self, run: LabRun, day: datetime) -> None:
        self.run, self.day = run, day

    def lines(self, log: str) -> list[tuple[float, str]]:
        if log == "learner":
            text, line_re = (self.run.run_dir / "train.log").read_text(errors="replace"), LEARNER_LINE
        else:
            text, line_re = self.run.worker_log(log), WORKER_LINE
        found = []
        for line in text.splitlines():
            if (match := line_re.match(line)) is None:
                continue
            stamp = match.group(1).replace(",", ".")
            when = datetime.fromisoformat(stamp) if log == "learner" else \
                datetime.fromisoformat(f"{self.day:%Y-%m-%d} {stamp}")
            if log != "learner" and when < self.day - timedelta(hours=1):  # past midnight
                when += timedelta(days=1)
            found.append((when.timestamp(), match.group(2)))
        return found

    def first(self, log: str, pattern: str, after: float) -> float | None:
        regex = re.compile(pattern)
        return next((t for t, text in self.lines(log) if t >= after and regex.search(text)), None)

    def last_of_firsts(self, pairs: list[tuple[str, str]], after: float) -> float | None:
        """When every (log, pattern) has matched after ``after``: the latest first match."""
        times = [self.first(log, pattern, after) for log, pattern in pairs]
        return None if any(t is None for t in times) else max(times)


def learner_steps(run_dir: Path) -> list[float]:
    return [r["time"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]


def play(case: Case, lab: Lab, run: LabRun, logs: Logs, outage_s: float, settle_s: float) -> dict:
    since = time.time()
    for worker in case.fed_by_r1:
        wait_until(lambda worker=worker: logs.first(worker, LOADED_FROM_R1, since) is not None, TREE_WAIT_S,
                   f"{worker} to load a version from r1 (the tree {case.name} cuts into)")
    if case.after_publish:
        published = len(learner_steps(run.run_dir))
        wait_until(lambda: len(learner_steps(run.run_dir)) > published, 300, "a version to be published")
        since = time.time()  # a fetch of this version that left r1 at its start, before the cut, counts
        time.sleep(1.0)
    print(f"  {case.name}: cutting {case.host}{' from ' + case.peer if case.peer else ''} for {outage_s:.0f}s",
          flush=True)
    cut = time.time()
    with lab.partition(case.host, case.peer):
        time.sleep(outage_s)
    healed = time.time()

    def recovered() -> float | None:
        if case.recover is not None:
            return logs.last_of_firsts(case.recover, cut)
        return next((t for t in learner_steps(run.run_dir) if t > healed), None)

    deadline = time.monotonic() + 180
    while recovered() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(settle_s)
    back = recovered()
    detected = logs.last_of_firsts(case.detect, since)
    waited = logs.first("learner", r"waiting \d+s for step \d+'s data", cut)
    return {"case": case.name, "cut": f"{case.host}{' <-/-> ' + case.peer if case.peer else ' from all'}",
            "cut_at": cut, "healed_at": healed, "outage_s": healed - cut, "timeout": case.timeout,
            "detected_s": None if detected is None else max(detected - cut, 0.0),
            "recovered_s": None if back is None else back - healed,
            "learner_said_why": waited is not None and waited < healed + 5}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/partitions")
    outage_s, long_outage_s, settle_s = (18.0, 20.0, 5.0) if args.quick else (45.0, 180.0, 20.0)
    started = time.time()
    hosts = [HostSpec("learner", LINK_MBPS, LINK_MBPS)] + [HostSpec(w, LINK_MBPS, LINK_MBPS) for w in UPLOAD_CAP]
    run_dir = args.out / "run"
    for old in (run_dir, run_dir.parent / "run-processes"):  # an earlier invocation's, under this --out
        shutil.rmtree(old, ignore_errors=True)
    rows = []
    with Lab(hosts) as lab:
        run = LabRun(lab, "learner", run_dir, RUN)
        with run:
            for worker, mbps in UPLOAD_CAP.items():
                run.worker(worker, worker, "--upload-mbps", str(mbps))
            logs = Logs(run, datetime.now())
            wait_until(lambda: len(learner_steps(run_dir)) >= 5, 600, "the first 5 learner steps")
            run.wait_for_worker_line("r2", LOADED, 600)  # its first weights
            for case in CASES:
                rows.append(play(case, lab, run, logs, long_outage_s if case.name == "learner_all" else outage_s,
                                 settle_s))
            steps_before_stop = len(learner_steps(run_dir))
            run.learner.send_signal(signal.SIGTERM)  # a clean stop: checkpoint, reliability report, summary
            finished = run.wait(300) == 0 and (run_dir / "reliability.json").exists()
    report = json.loads((run_dir / "reliability.json").read_text()) if finished else {}
    group_size = load_config(str(run_dir / "config.yaml")).rollout.group_size
    books = ledger(run_dir, [run.logs / f"{w}.log" for w in UPLOAD_CAP], report, group_size) if report else {}
    for row, case in zip(rows, CASES):
        at_work = logs.first(case.host, r"groups accepted", row["healed_at"]) if case.host in UPLOAD_CAP else None
        row.update({k: books.get(k) for k in ("prompts_lost", "trained_twice", "ledger_gap")},
                   at_work_s=None if at_work is None else at_work - row["healed_at"],
                   run_finished="yes" if finished else "no")
    columns = ["case", "cut", "outage_s", "timeout", "detected_s", "recovered_s", "at_work_s", "learner_said_why",
               "prompts_lost", "trained_twice", "ledger_gap", "run_finished"]
    print(f"\n{steps_before_stop} learner steps, links {LINK_MBPS:g} Mbit/s both ways, 3 workers; "
          f"ledger: {books}")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"quick": args.quick, "link_mbps": LINK_MBPS, "steps": steps_before_stop,
                                          "ledger": books, "reliability": report, "wall_s": time.time() - started})
    print(f"\nwrote {path} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
