"""Every drawing of a run (matplotlib, Agg), from its run directory's files (:class:`RunData`):
the PNGs a run leaves (``curves.png``, ``timeline.png``: :func:`save_run_plots`) and the
figures of ``echo2 report``; each figure function returns None when the run has nothing to draw.
The live dashboard draws the same series in the browser from the same files
(:mod:`echo2.report.live`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from echo2.report.data import RunData, load_run  # noqa: E402

#: Bins of the utilization timeline.
UTILIZATION_BINS = 60


def _axes(rows: int = 1, cols: int = 1, height: float = 3.6) -> tuple[Figure, list]:
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, height * rows), squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _time_unit(span: float) -> tuple[float, str]:
    """Divisor and unit for a time axis spanning ``span`` seconds."""
    return (3600.0, "h") if span > 3 * 3600 else (60.0, "min") if span > 600 else (1.0, "s")


def _unpriced(ax) -> None:
    """The dollars panel of a run without prices: say so instead of drawing everything at $0."""
    ax.axis("off")
    ax.text(0.5, 0.5, "no prices set for this run\n(activation.learner_price_per_hour,\nemulation.fleet[].price_per_hour)",
            ha="center", va="center", fontsize=9, color="gray", transform=ax.transAxes)


def quality(run: RunData) -> Figure | None:
    """Held-out accuracy and training reward against wall time and against dollars."""
    evals, steps = run.evals, [r for r in run.steps if "reward_mean" in r]
    if not evals and not steps:
        return None
    span = max((r["time"] for r in run.records), default=run.origin) - run.origin
    unit, label = _time_unit(span)
    fig, (by_time, by_cost) = _axes(1, 2)
    panels = [(by_time, lambda r: (r["time"] - run.origin) / unit, f"wall time ({label})")]
    if run.priced:
        panels.append((by_cost, lambda r: run.cost_at(r["time"]), "dollars spent"))
    else:
        _unpriced(by_cost)
    for ax, x_of, xlabel in panels:
        if steps:
            ax.plot([x_of(r) for r in steps], [r["reward_mean"] for r in steps], color="tab:gray", alpha=0.6,
                    label="training reward (batch mean)")
        if evals:
            ax.plot([x_of(r) for r in evals], [r["eval_accuracy"] for r in evals], "o-", color="tab:blue",
                    label="held-out greedy accuracy")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction")
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=8)
    fig.tight_layout()
    return fig


def progress(run: RunData) -> Figure | None:
    """Learner steps against wall time and against dollars (with the centralized baseline)."""
    steps = run.steps
    if not steps:
        return None
    span = steps[-1]["time"] - run.origin
    unit, label = _time_unit(span)
    fig, (by_time, by_cost) = _axes(1, 2)
    by_time.plot([(r["time"] - run.origin) / unit for r in steps], [r["version"] for r in steps], color="black")
    by_time.set_xlabel(f"wall time ({label})")
    by_time.set_ylabel("learner steps")
    by_time.grid(alpha=0.3)
    if not run.priced:
        _unpriced(by_cost)
        fig.tight_layout()
        return fig
    by_cost.plot([r.get("cost_usd", 0.0) for r in steps], [r["version"] for r in steps], color="black",
                 label="this run (learner + workers)")
    if any(r.get("cost_centralized_usd", 0) > 0 for r in steps):
        by_cost.plot([r["cost_centralized_usd"] for r in steps], [r["version"] for r in steps], "--",
                     color="tab:red", label="centralized baseline" if run.simulated else "centralized counterfactual")
        by_cost.legend(fontsize=8)
    by_cost.set_xlabel("dollars spent")
    by_cost.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def utilization(run: RunData) -> Figure | None:
    """Share of each time bin the learner computed (from its busy intervals), and the run's
    cumulative utilization (busy / (busy + idle), as the learner reports it)."""
    width, shares = run.busy_shares(UTILIZATION_BINS)
    steps = run.steps
    if not shares and not steps:
        return None
    fig, (ax,) = _axes(1, 1, height=3.2)
    fig.set_size_inches(10.4, 3.2)
    end = max([run.origin + width * len(shares)] + [r["time"] for r in steps])
    unit, label = _time_unit(end - run.origin)
    if shares:
        ax.bar([(index + 0.5) * width / unit for index in range(UTILIZATION_BINS)], shares, width=width / unit * 0.95,
               color="tab:blue", alpha=0.45, label="learner busy share per bin")
    if steps:
        ax.plot([(r["time"] - run.origin) / unit for r in steps], [r["utilization"] for r in steps], color="black",
                label="cumulative utilization")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(f"wall time ({label})")
    ax.set_ylabel("learner utilization")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def staleness(run: RunData) -> Figure | None:
    """Groups trained by version lag (step - version of the policy that generated them)."""
    counts = run.staleness_counts()
    if not counts:
        return None
    fig, (ax,) = _axes(1, 1)
    lags = sorted(counts)
    total = sum(counts.values())
    ax.bar(lags, [counts[k] / total for k in lags], color="tab:purple")
    ax.set_xticks(lags)
    ax.set_xlabel("staleness (versions behind the learner)")
    ax.set_ylabel("share of trained groups")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def dissemination(run: RunData) -> Figure | None:
    """Publish -> last worker holding the version, per version, and its distribution."""
    spans = [(i["version"], i["end"] - i["start"]) for i in run.disseminated]
    if not spans:
        spans = [(r["version"], r["dissemination_max_s"]) for r in run.steps if "dissemination_max_s" in r]
    if not spans:
        return None
    fig, (by_version, histogram) = _axes(1, 2)
    by_version.plot([v for v, _ in spans], [s for _, s in spans], ".", color="tab:purple", markersize=3)
    by_version.set_xlabel("version")
    by_version.set_ylabel("dissemination latency (s)")
    histogram.hist([s for _, s in spans], bins=30, color="tab:purple")
    histogram.set_xlabel("dissemination latency (s)")
    histogram.set_ylabel("versions")
    for ax in (by_version, histogram):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def costs(run: RunData) -> Figure | None:
    """Dollars by worker class and for the learner at the end of the run (and the baseline)."""
    if not run.priced:
        return None
    last = run.steps[-1]
    parts = {key[5:-4]: value for key, value in last.items() if key.startswith("cost/")}
    parts["learner"] = last.get("cost_learner_usd", 0.0)
    fig, (ax,) = _axes(1, 1)
    names = list(parts)
    ax.barh(names, [parts[n] for n in names], color="tab:green", label="this run")
    if last.get("cost_centralized_usd", 0) > 0:
        ax.axvline(last["cost_centralized_usd"], color="tab:red", linestyle="--",
                   label="centralized baseline (whole run)" if run.simulated else "centralized counterfactual")
    ax.axvline(last["cost_usd"], color="black", linestyle=":", label="this run (total)")
    ax.set_xlabel("dollars")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def draw_payoff_map(ax, points: list[tuple[str, float, float, float]], utilization: float = 1.0) -> None:
    """The map of :mod:`echo2.planning.payoff` on ``ax``: the dollars ratio (distributed /
    centralized) at learner utilization ``utilization`` over the workers' price per trained token
    relative to the co-located learner's (x) and the baseline's share of a step spent generating (y),
    break-even drawn bold; ``points`` (label, rho, g, simulated ratio) marked on it."""
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    from echo2.planning.payoff import cost_ratio

    rho, share = np.meshgrid(np.linspace(0.0, 3.0, 121), np.linspace(0.05, 0.9, 86))
    ratios = cost_ratio(rho, share, utilization)
    levels = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0]
    filled = ax.contourf(rho, share, ratios, levels=[0.3, *levels, 10.0], cmap="RdYlGn_r", alpha=0.6, extend="both",
                         norm=TwoSlopeNorm(vmin=0.3, vcenter=1.0, vmax=3.0))
    lines = ax.contour(rho, share, ratios, levels=levels, colors="gray", linewidths=0.5)
    ax.clabel(lines, fmt="%.2g", fontsize=7)
    ax.contour(rho, share, ratios, levels=[1.0], colors="black", linewidths=1.8)
    numbered = len(points) > 2  # many labels: numbers on the map, the names in a key beside it
    for number, (label, x, y, ratio) in enumerate(points, 1):
        ax.plot(min(x, 2.95), y, "o", color="black", markersize=4)
        ax.annotate(str(number) if numbered else f"{label} ({ratio:.2f})", (min(x, 2.95), y), fontsize=8,
                    xytext=(4, 3), textcoords="offset points")
    if numbered:
        key = "\n".join(f"{n} {label}: rho {x:.2f}, g {y:.2f}, ratio {ratio:.2f}"
                        for n, (label, x, y, ratio) in enumerate(points, 1))
        ax.text(1.24, 1.0, key + "\n(rho past 3 drawn at 3)", transform=ax.transAxes, fontsize=7.5, va="top",
                family="monospace")
    ax.set_xlabel("workers' $ per trained token / the co-located learner's (rho)")
    ax.set_ylabel("baseline's share of a step generating (g)")
    ax.set_xlim(0, 3.0)
    ax.set_ylim(0.05, 0.9)
    ax.figure.colorbar(filled, ax=ax, label=f"distributed / centralized dollars at utilization {utilization:.2f}")


def payoff(run: RunData) -> Figure | None:
    """A simulated run on the map of where distributing pays (:func:`draw_payoff_map`)."""
    point = (run.simulation or {}).get("payoff")
    if point is None:
        return None
    fig, (ax,) = _axes(1, 1, height=4.6)
    fig.set_size_inches(7.5, 4.6)
    draw_payoff_map(ax, [("this run", point["token_price_ratio"], point["generation_share"], point["ratio"])],
                    utilization=point["utilization"])
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the PNGs a run leaves
TIMELINE_COLOURS = {"train": "tab:blue", "generate": "tab:green", "fetch": "tab:orange", "disseminate": "tab:purple"}
TIMELINE_LABELS = {"train": "learner step", "generate": "generation", "fetch": "weight fetch",
                   "disseminate": "dissemination (publish -> last worker loaded)"}


def learning(run: RunData) -> Figure | None:
    """Held-out accuracy, sampled reward and training reward against wall time; below, the share of
    degenerate groups (and of groups DAPO's dynamic sampling filtered), EchoClip's selected tokens
    and auxiliary loss when it is on, and the run's cost so far (by worker class, and the
    centralized counterfactual) when any cost accrued."""
    steps = [r for r in run.records if "reward_mean" in r]
    if not steps and not run.evals:
        return None
    panels = [_rewards]
    if any("degenerate_all_correct_fraction" in r for r in steps):
        panels.append(_degeneration)
    if any("echoclip_tokens" in r for r in steps):
        panels.append(_echoclip)
    if any(r.get("cost_centralized_usd", 0) > 0 for r in steps):
        panels.append(_spending)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 4.5 + 3 * (len(panels) - 1)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        panel(ax, steps, run)
        ax.set_xlabel("wall time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_title(run.run_dir.name)
    fig.tight_layout()
    return fig


def _rewards(ax, steps: list[dict], run: RunData) -> None:
    evals = run.evals
    ax.plot([r["time"] - run.origin for r in steps], [r["reward_mean"] for r in steps], color="tab:gray", alpha=0.5,
            label="training reward (batch mean)")
    ax.plot([r["time"] - run.origin for r in evals], [r["eval_accuracy"] for r in evals], "o-", color="tab:blue",
            label="held-out greedy accuracy")
    sampled = [r for r in evals if "eval_sampled_reward" in r]  # absent: eval.sampled was off
    ax.plot([r["time"] - run.origin for r in sampled], [r["eval_sampled_reward"] for r in sampled], "s--",
            color="tab:red", label="held-out sampled reward (T=1)")
    ax.set_ylabel("fraction")
    ax.legend()


def _degeneration(ax, steps: list[dict], run: RunData) -> None:
    steps = [r for r in steps if "degenerate_all_correct_fraction" in r]
    times = [r["time"] - run.origin for r in steps]
    ax.plot(times, [r["degenerate_all_correct_fraction"] for r in steps], color="tab:green",
            label="degenerate groups: all correct")
    ax.plot(times, [r["degenerate_all_wrong_fraction"] for r in steps], color="tab:red",
            label="degenerate groups: all wrong")
    sampled = [r for r in steps if r.get("dapo_drawn_groups")]
    if sampled:
        ax.plot([r["time"] - run.origin for r in sampled],
                [r["dapo_filtered_groups"] / r["dapo_drawn_groups"] for r in sampled], "--", color="black",
                label="filtered by dynamic sampling (share of drawn)")
    ax.set_ylabel("share of the step's groups")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)


def _echoclip(ax, steps: list[dict], run: RunData) -> None:
    steps = [r for r in steps if "echoclip_tokens" in r]
    times = [r["time"] - run.origin for r in steps]
    ax.plot(times, [r["echoclip_tokens"] for r in steps], color="tab:purple", label="EchoClip tokens per step")
    ax.set_ylabel("tokens", color="tab:purple")
    loss_ax = ax.twinx()
    loss_ax.plot(times, [r.get("echoclip_loss", 0.0) for r in steps], "--", color="tab:orange",
                 label="EchoClip auxiliary loss")
    loss_ax.set_ylabel("auxiliary loss", color="tab:orange")
    handles = ax.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8)


def _spending(ax, steps: list[dict], run: RunData) -> None:
    times = [r["time"] - run.origin for r in steps]
    ax.plot(times, [r["cost_usd"] for r in steps], color="black", label="this run (learner + active workers)")
    ax.plot(times, [r["cost_centralized_usd"] for r in steps], "--", color="tab:red",
            label="centralized counterfactual (rollout hours at the learner's price)")
    for key in sorted({k for r in steps for k in r if k.startswith("cost/")}):
        ax.plot(times, [r.get(key, 0.0) for r in steps], alpha=0.7, label=f"workers: {key[5:-4]}")
    ax.set_ylabel("dollars so far")
    ax.legend(fontsize=8)


def timeline(run: RunData, max_seconds: float | None = 60.0) -> Figure | None:
    """Learner busy intervals against each worker's generation and weight-fetch intervals, and
    each version's dissemination (row ``broadcast``: publish until the last live worker loaded it).
    Only the first ``max_seconds`` are drawn, so that individual intervals stay visible."""
    intervals = run.timeline
    if not intervals:
        return None
    origin = min(i["start"] for i in intervals)
    rows = ["learner"] + sorted({i["who"] for i in intervals} - {"learner", "broadcast"})
    rows += ["broadcast"] if any(i["who"] == "broadcast" for i in intervals) else []
    fig, ax = plt.subplots(figsize=(10, 1 + 0.6 * len(rows)))
    for interval in intervals:
        start = interval["start"] - origin
        if max_seconds is not None and start > max_seconds:
            continue
        offset = 0.2 if interval["kind"] == "fetch" else 0.0
        ax.barh(rows.index(interval["who"]) + offset, interval["end"] - interval["start"], left=start,
                height=0.35 if offset else 0.6, color=TIMELINE_COLOURS.get(interval["kind"], "tab:gray"),
                alpha=0.5 if interval["kind"] == "disseminate" else 1.0)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since start")
    kinds = [k for k in TIMELINE_COLOURS if any(i["kind"] == k for i in intervals)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=TIMELINE_COLOURS[k]) for k in kinds]
    ax.legend(handles, [TIMELINE_LABELS[k] for k in kinds], loc="upper right", fontsize=8)
    ax.set_title("timeline: learner busy vs worker generation / weight fetch / dissemination")
    fig.tight_layout()
    return fig


def save_run_plots(run_dir: Path) -> list[Path]:
    """``curves.png`` (:func:`learning`) and ``timeline.png`` (:func:`timeline`) into ``run_dir``."""
    run, written = load_run(run_dir), []
    for name, draw in (("curves.png", learning), ("timeline.png", timeline)):
        if (fig := draw(run)) is not None:
            fig.savefig(run_dir / name, dpi=110)
            plt.close(fig)
            written.append(run_dir / name)
    return written
