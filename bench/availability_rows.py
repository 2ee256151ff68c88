"""The availability rows of ``bench/attacks.py``: one run per attack, each against the clean run
of the same settings played just before (``avail-clean``), read over the attack's window.

A row's figures: the learner's steps/s in the attack's window (from its ``attack_start`` to its
``attack_end``) over the clean run's in the same window after its own first step
(``steps_per_s_vs_clean``), and over the first minute of it (``first_minute_vs_clean``: for a
relay, the minute after its stall); the probe's heartbeat answers in the window (the slowest,
``heartbeat_max_s``); honest workers quarantined, or parked when the run ended; the attacker's
groups trained; what the coordinator refused or left out (``refused``), and for the events flood
how fast ``timeline.jsonl`` grew from the attacker's lines (``timeline_bytes_per_s``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from attack_rows import nothing_trained
from attack_runs import Attack, Outcome

#: The bar of issue 60: steps/s under attack at least this share of a clean run's.
STEPS_BAR = 0.8
#: Heartbeats must be answered within this (the dead-worker timeout is 30 s).
HEARTBEAT_BAR_S = 1.0
#: The window read as "the minute after the stall".
FIRST_MINUTE_S = 60.0


def steps_per_s(run: Outcome, start: float, end: float) -> float:
    """Learner steps logged in ``[start, end]`` (wall times), per second."""
    times = [r["time"] for r in run.records if "loss" in r]
    return sum(start <= t <= end for t in times) / max(end - start, 1e-9)


def first_step_t(run: Outcome) -> float:
    return min(r["time"] for r in run.records if "loss" in r)


def window(run: Outcome, spec: Attack) -> tuple[float, float]:
    """The attack's window: its start to its end (or the run's last step)."""
    start = next((e["t"] for e in run.events(spec, "attack_start")), first_step_t(run))
    end = next((e["t"] for e in run.events(spec, "attack_end")), run.last_step_t)
    return start, min(end, run.last_step_t)


def ratio(run: Outcome, clean: Outcome, start: float, end: float) -> float:
    """Steps/s in ``[start, end]`` of ``run`` over the clean run's in the same window after its first
    step, that window ending with the clean run's last step at the latest (a run four times as long
    as the clean one is compared with the clean run's pace, not with its silence after its end)."""
    offset = first_step_t(clean) - first_step_t(run)
    clean_end = min(end + offset, clean.last_step_t)
    return steps_per_s(run, start, end) / max(steps_per_s(clean, start + offset, clean_end), 1e-9)


def probe_max_s(run: Outcome, probe: Attack | None, start: float, end: float) -> float | None:
    if probe is None:
        return None
    seconds = [e["seconds"] for e in run.events(probe, "probe") if start <= e["t"] <= end]
    return max(seconds, default=None)


def timeline_rate(run: Outcome, name: str, start: float, end: float) -> float:
    """Bytes a second of ``timeline.jsonl`` lines naming ``name`` (drawn at ``start``..``end`` or clipped into it)."""
    path = run.run_dir / "timeline.jsonl"
    lines = [line for line in path.read_text().splitlines() if f'"who": "{name}"' in line] if path.exists() else []
    return sum(len(line) + 1 for line in lines) / max(end - start, 1e-9)


def timeline_span(run: Outcome) -> float:
    """Seconds from the earliest start to the latest end in ``timeline.jsonl`` (what the plot spans)."""
    path = run.run_dir / "timeline.jsonl"
    intervals = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return max((i["end"] for i in intervals), default=0.0) - min((i["start"] for i in intervals), default=0.0)


def availability_row(run: Outcome, spec: Attack, clean: Outcome, probe: Attack | None) -> dict[str, Any]:
    start, end = window(run, spec)
    reliability = run.reliability
    row: dict[str, Any] = {
        "steps_per_s_vs_clean": ratio(run, clean, start, end),
        "first_minute_vs_clean": ratio(run, clean, start, min(end, start + FIRST_MINUTE_S)),
        "heartbeat_max_s": probe_max_s(run, probe, start, end),
        "honest_quarantined": run.honest_quarantined(),
        "honest_parked_at_end": run.honest_parked,
        "window_s": end - start,
        **nothing_trained(run, spec),
        "refused": {key: reliability.get(key, 0) for key in
                    ("registrations_refused_trial", "requests_rate_limited", "timeline_events_dropped")},
    }
    events = run.events(spec)
    ended = next((e for e in events if e["event"] == "attack_end"), {})
    if spec.kind in ("trickle_relay", "silent_relay"):
        text = "\n".join(path.read_text() for path in (run.run_dir / "workers").glob("*.log"))
        row["left_relay"] = text.count("too slow") + text.count("stalled")
        row["relay_demoted"] = "no peer's source for" in run.train_log
        row["how"] = (f"relay served {ended.get('bytes', 0)} bytes to {ended.get('requests', 0)} chunk requests; "
                      f"peers left it {row['left_relay']}x; demoted: {row['relay_demoted']}")
    elif spec.kind == "events_flood" or spec.kind == "wide_interval":
        row["timeline_bytes_per_s"] = timeline_rate(run, spec.name, start, end)
        row["timeline_span_s"] = timeline_span(run)
        row["how"] = (f"sent {ended.get('sent', 0)}, refused {ended.get('refused', 0)}; its lines "
                      f"{row['timeline_bytes_per_s']:.0f} B/s; timeline spans {row['timeline_span_s']:.0f} s")
    elif spec.kind in ("longpoll_flood", "heartbeat_flood"):
        row["how"] = f"sent {ended.get('sent', 0)}, refused {ended.get('refused', 0)} (429)"
    elif spec.kind == "call_flood":
        row["how"] = (f"{ended.get('sent', 0)} calls sent on one episode key, {ended.get('refused', 0)} refused (429), "
                      f"{ended.get('answered', 0)} answered")
    else:
        submitted = sum(1 for e in events if e["event"] == "submitted")
        row["how"] = (f"{ended.get('registered', spec.params.get('count'))} identities registered "
                      f"({ended.get('refused', 0)} refused, {ended.get('quarantined', 0)} quarantined), {submitted} "
                      f"junk submissions accepted; {row['refused']}")
    row["detected"] = "yes" if meets_bars(row) else "no"
    return row


def meets_bars(row: dict[str, Any]) -> bool:
    """The row's bars: steps/s, heartbeats, nothing trained past a defence, nothing honest lost."""
    heartbeat = row["heartbeat_max_s"]
    return (row["steps_per_s_vs_clean"] >= STEPS_BAR and row["first_minute_vs_clean"] >= STEPS_BAR
            and (heartbeat is None or heartbeat <= HEARTBEAT_BAR_S) and row["attacker_groups_trained_after"] == 0
            and not row["honest_quarantined"] and not row["honest_parked_at_end"])


def summary(rows: list[dict[str, Any]]) -> str:
    return json.dumps({r["attack"]: round(r["steps_per_s_vs_clean"], 2) for r in rows})


def plot_availability(rows: list[dict[str, Any]], out: Path) -> None:
    """Steps/s under each attack over the clean run's (whole window, first minute) against the
    bar, and the probe's slowest heartbeat answer (the availability rows of ``rows``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "steps_per_s_vs_clean" in r]
    labels, x = [r["attack"] for r in rows], range(len(rows))
    fig, (steps, beats) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.4
    steps.bar([i - width / 2 for i in x], [r["steps_per_s_vs_clean"] for r in rows], width, label="attack window")
    steps.bar([i + width / 2 for i in x], [r["first_minute_vs_clean"] for r in rows], width, label="its first minute")
    steps.axhline(STEPS_BAR, color="tab:red", linestyle="--", label=f"bar ({STEPS_BAR:g}x)")
    steps.set_xticks(list(x), labels, rotation=35, ha="right", fontsize=8)
    steps.set_ylabel("learner steps/s vs the clean run")
    steps.set_title("Availability under each attack")
    steps.legend(fontsize=8)
    beats.barh(labels, [r["heartbeat_max_s"] or 0 for r in rows], color="tab:orange")
    beats.axvline(HEARTBEAT_BAR_S, color="tab:red", linestyle="--")
    beats.tick_params(axis="y", labelsize=8)
    beats.set_xlabel("slowest heartbeat answer in the window (s)")
    beats.set_title("Heartbeats under attack")
    fig.tight_layout()
    fig.savefig(out / "availability.png", dpi=110)
    plt.close(fig)
