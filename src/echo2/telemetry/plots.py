"""Plots written into the run directory at the end of a run (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from echo2.telemetry.metrics import read_jsonl  # noqa: E402

TIMELINE_COLOURS = {"train": "tab:blue", "generate": "tab:green", "fetch": "tab:orange", "disseminate": "tab:purple"}
TIMELINE_LABELS = {"train": "learner step", "generate": "generation", "fetch": "weight fetch",
                   "disseminate": "dissemination (publish -> last worker loaded)"}


def plot_curves(run_dir: Path) -> Path:
    """Held-out accuracy, sampled reward and training reward against wall time; below, the run's
    cost so far (by worker class, and the centralized counterfactual) when any cost accrued."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    start = records[0]["time"] if records else 0.0
    evals = [r for r in records if "eval_accuracy" in r]
    steps = [r for r in records if "reward_mean" in r]
    priced = any(r.get("cost_centralized_usd", 0) > 0 for r in steps)
    fig, axes = plt.subplots(2 if priced else 1, 1, figsize=(8, 7.5 if priced else 4.5), squeeze=False)
    ax = axes[0][0]
    ax.plot([r["time"] - start for r in steps], [r["reward_mean"] for r in steps], color="tab:gray", alpha=0.5,
            label="training reward (batch mean)")
    ax.plot([r["time"] - start for r in evals], [r["eval_accuracy"] for r in evals], "o-", color="tab:blue",
            label="held-out greedy accuracy")
    ax.plot([r["time"] - start for r in evals], [r["eval_sampled_reward"] for r in evals], "s--",
            color="tab:red", label="held-out sampled reward (T=1)")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("fraction")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    ax.legend()
    if priced:
        _plot_costs(axes[1][0], steps, start)
    path = run_dir / "curves.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_costs(ax, steps: list[dict], start: float) -> None:
    times = [r["time"] - start for r in steps]
    ax.plot(times, [r["cost_usd"] for r in steps], color="black", label="this run (learner + active workers)")
    ax.plot(times, [r["cost_centralized_usd"] for r in steps], "--", color="tab:red",
            label="centralized counterfactual (rollout hours at the learner's price)")
    for key in sorted({k for r in steps for k in r if k.startswith("cost/")}):
        ax.plot(times, [r.get(key, 0.0) for r in steps], alpha=0.7, label=f"workers: {key[5:-4]}")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("dollars so far")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_timeline(run_dir: Path, max_seconds: float | None = 60.0) -> Path:
    """Learner busy intervals against each worker's generation and weight-fetch intervals, and
    each version's dissemination (row ``broadcast``: publish until the last live worker loaded it).

    Only the first ``max_seconds`` after the first learner interval are drawn, so that
    individual intervals stay visible.
    """
    intervals = read_jsonl(run_dir / "timeline.jsonl")
    origin = min((i["start"] for i in intervals), default=0.0)
    rows = ["learner"] + sorted({i["who"] for i in intervals} - {"learner", "broadcast"})
    rows += ["broadcast"] if any(i["who"] == "broadcast" for i in intervals) else []
    fig, ax = plt.subplots(figsize=(10, 1 + 0.6 * len(rows)))
    for interval in intervals:
        start = interval["start"] - origin
        if max_seconds is not None and start > max_seconds:
            continue
        row = rows.index(interval["who"])
        offset = 0.2 if interval["kind"] == "fetch" else 0.0
        ax.barh(row + offset, interval["end"] - interval["start"], left=start, height=0.35 if offset else 0.6,
                color=TIMELINE_COLOURS.get(interval["kind"], "tab:gray"),
                alpha=0.5 if interval["kind"] == "disseminate" else 1.0)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since start")
    kinds = [k for k in TIMELINE_COLOURS if any(i["kind"] == k for i in intervals)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=TIMELINE_COLOURS[k]) for k in kinds]
    ax.legend(handles, [TIMELINE_LABELS[k] for k in kinds], loc="upper right", fontsize=8)
    ax.set_title("timeline: learner busy vs worker generation / weight fetch / dissemination")
    path = run_dir / "timeline.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
