"""Plots written into the run directory at the end of a run (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from echo2.telemetry.metrics import read_intervals, read_jsonl  # noqa: E402

TIMELINE_COLOURS = {"train": "tab:blue", "generate": "tab:green", "fetch": "tab:orange", "disseminate": "tab:purple"}
TIMELINE_LABELS = {"train": "learner step", "generate": "generation", "fetch": "weight fetch",
                   "disseminate": "dissemination (publish -> last worker loaded)"}


def plot_curves(run_dir: Path) -> Path:
    """Held-out accuracy, sampled reward and training reward against wall time; below, the share of
    degenerate groups (and of groups DAPO's dynamic sampling filtered), EchoClip's selected tokens
    and auxiliary loss when it is on, and the run's cost so far (by worker class, and the
    centralized counterfactual) when any cost accrued."""
    records = read_jsonl(run_dir / "metrics.jsonl")
    start = records[0]["time"] if records else 0.0
    steps = [r for r in records if "reward_mean" in r]
    panels = [_plot_rewards]
    if any("degenerate_all_correct_fraction" in r for r in steps):
        panels.append(_plot_degeneration)
    if any("echoclip_tokens" in r for r in steps):
        panels.append(_plot_echoclip)
    if any(r.get("cost_centralized_usd", 0) > 0 for r in steps):
        panels.append(_plot_costs)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 4.5 + 3 * (len(panels) - 1)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        panel(ax, records, start)
    axes[0][0].set_title(run_dir.name)
    path = run_dir / "curves.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_rewards(ax, records: list[dict], start: float) -> None:
    evals = [r for r in records if "eval_accuracy" in r]
    steps = [r for r in records if "reward_mean" in r]
    ax.plot([r["time"] - start for r in steps], [r["reward_mean"] for r in steps], color="tab:gray", alpha=0.5,
            label="training reward (batch mean)")
    ax.plot([r["time"] - start for r in evals], [r["eval_accuracy"] for r in evals], "o-", color="tab:blue",
            label="held-out greedy accuracy")
    ax.plot([r["time"] - start for r in evals], [r["eval_sampled_reward"] for r in evals], "s--",
            color="tab:red", label="held-out sampled reward (T=1)")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("fraction")
    ax.grid(alpha=0.3)
    ax.legend()


def _plot_degeneration(ax, records: list[dict], start: float) -> None:
    steps = [r for r in records if "degenerate_all_correct_fraction" in r]
    times = [r["time"] - start for r in steps]
    ax.plot(times, [r["degenerate_all_correct_fraction"] for r in steps], color="tab:green",
            label="degenerate groups: all correct")
    ax.plot(times, [r["degenerate_all_wrong_fraction"] for r in steps], color="tab:red",
            label="degenerate groups: all wrong")
    sampled = [r for r in steps if r.get("dapo_drawn_groups")]
    if sampled:
        ax.plot([r["time"] - start for r in sampled], [r["dapo_filtered_groups"] / r["dapo_drawn_groups"]
                                                       for r in sampled], "--", color="black",
                label="filtered by dynamic sampling (share of drawn)")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("share of the step's groups")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _plot_echoclip(ax, records: list[dict], start: float) -> None:
    steps = [r for r in records if "echoclip_tokens" in r]
    times = [r["time"] - start for r in steps]
    ax.plot(times, [r["echoclip_tokens"] for r in steps], color="tab:purple", label="EchoClip tokens per step")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("tokens", color="tab:purple")
    ax.grid(alpha=0.3)
    loss_ax = ax.twinx()
    loss_ax.plot(times, [r.get("echoclip_loss", 0.0) for r in steps], "--", color="tab:orange",
                 label="EchoClip auxiliary loss")
    loss_ax.set_ylabel("auxiliary loss", color="tab:orange")
    handles = ax.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8)


def _plot_costs(ax, records: list[dict], start: float) -> None:
    steps = [r for r in records if "reward_mean" in r]
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
    intervals = read_intervals(run_dir / "timeline.jsonl")
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
