"""Silent partitions never hang anything: the five cases of ``bench/partitions.py --quick`` on a
real run across lab hosts, each noticed within its timeout, each healed, the books whole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from lab_support import lab_or_skip
from paths import REPO

#: Seconds past the timeout that applies within which a case must be noticed (a heartbeat period,
#: a reaper pass, a retry's backoff, and two cores shared by five processes).
SLACK_S = {"mid_lease": 8.0, "learner_download": 10.0, "relay_download": 10.0, "relay_serving": 10.0,
           "learner_all": 25.0}
TIMEOUT_S = {"mid_lease": 8.0, "learner_download": 6.0, "relay_download": 6.0, "relay_serving": 6.0,
             "learner_all": 8.0}

#: The learner's lines on who is in the fleet and the relay plan (joins, deaths, relay checks, quarantines).
MEMBERSHIP = re.compile(r"joined|declared dead|relay of|quarantin|left")
#: A worker's log line for a version it loaded, and r1's relay (the lab's second host) among its sources.
LOADED = re.compile(r"v\d+: \d+ chunks in")
R1_SOURCE = re.compile(r"\d+ from http://10\.77\.2\.2:\d+")


def process_logs(out: Path) -> dict[str, list[str]]:
    """Each process's log (learner, r1, r2, r3) as lines, by name."""
    return {log.stem: log.read_text(errors="replace").splitlines() for log in sorted((out / "run-processes").glob("*.log"))}


def print_logs_around(out: Path, row: dict, before_s: float = 10.0, after_s: float = 30.0) -> None:
    """Every process's log lines from ``before_s`` before a case's cut to ``after_s`` after its heal
    (pytest shows a failed test's output whole, where it cuts an assertion's message short): what
    each host did, and fetched from where, when a case went unnoticed."""
    start = datetime.fromtimestamp(row["cut_at"] - before_s).strftime("%H:%M:%S")
    end = datetime.fromtimestamp(row["healed_at"] + after_s).strftime("%H:%M:%S")
    logs = process_logs(out)
    print("--- the fleet over the whole run:", *[line for line in logs["learner"] if MEMBERSHIP.search(line)], sep="\n")
    print(f"--- {row['case']} ({row['cut']}): log lines {start}-{end}; row: {row}")
    for name, lines in logs.items():
        print(*[f"{name}: {line[:300]}" for line in lines if start <= line[:8] <= end], sep="\n")


def first_load_after(out: Path, worker: str, when: float) -> str | None:
    """The worker's first "vN: K chunks in Ts (n from URL, ...)" line after ``when`` (log times are
    the wall clock's, to the millisecond)."""
    since = datetime.fromtimestamp(when).strftime("%H:%M:%S.%f")[:12]
    return next((line for line in process_logs(out)[worker] if line[:12] >= since and LOADED.search(line)), None)


def failures(out: Path, name: str, row: dict) -> list[str]:
    """What a case's row breaks of the bounds and the books, in words (empty: none)."""
    broken = []
    if row["detected_s"] is None or row["detected_s"] > TIMEOUT_S[name] + SLACK_S[name]:
        broken.append(f"not noticed within {TIMEOUT_S[name] + SLACK_S[name]:g} s")
    if row["recovered_s"] is None or row["recovered_s"] > 60:
        broken.append("not back by itself within 60 s of the heal")
    if (row["prompts_lost"], row["trained_twice"], row["ledger_gap"]) != (0, 0, 0):
        broken.append("the books do not balance")
    if row["run_finished"] != "yes":
        broken.append("the run did not stop cleanly")
    if name == "relay_download":  # a relay's child falls back to another source, not waiting for the heal
        loaded = first_load_after(out, "r3", row["cut_at"])
        sources = R1_SOURCE.sub("", loaded.split("(", 1)[-1]) if loaded else ""
        if "from http" not in sources:
            broken.append(f"r3's first version after the cut did not come from another source than r1: {loaded}")
    if name == "learner_all" and not row["learner_said_why"]:
        broken.append("the learner did not say why it waited")
    return broken


def test_every_partition_is_noticed_in_time_and_healed_with_the_books_whole(tmp_path):
    lab_or_skip(nat=False)
    done = subprocess.run([sys.executable, str(REPO / "bench" / "partitions.py"), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        for name, lines in process_logs(tmp_path).items():
            print(f"--- the last lines of {name}'s log:", *lines[-40:], sep="\n")
    assert done.returncode == 0, done.stderr[-500:]
    rows = {r["case"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    assert set(rows) == set(SLACK_S)
    broken = {name: failures(tmp_path, name, row) for name, row in rows.items()}
    for name, row in rows.items():
        if broken[name]:
            print_logs_around(tmp_path, row)
    assert not any(broken.values()), {name: why for name, why in broken.items() if why}
