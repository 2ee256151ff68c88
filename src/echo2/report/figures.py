"""The report's figures (matplotlib, Agg); each returns None when the run has nothing to draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from echo2.report.data import RunData  # noqa: E402

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
    ax.text(0.5, 0.5, "no prices set for this run\n(activation.learner_price_per_hour,\nworkers.fleet[].price_per_hour)",
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
