"""``echo2 report RUN_DIR``: one self-contained HTML file for a real or simulated run.

Every figure is a PNG embedded as base64 and the style sheet is inline, so the file can be
mailed or archived alone: no scripts, no external assets.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from echo2.report import figures
from echo2.report.data import RunData, load_run

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
.kind { color: #666; margin-top: 0; } img { max-width: 100%; }
table { border-collapse: collapse; font-size: 0.92em; } td, th { border: 1px solid #ddd; padding: 3px 10px; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.missing { color: #888; font-style: italic; }
"""

#: (section title, figure, what it shows, what to say when the run has nothing for it), in page order.
SECTIONS: list[tuple[str, Callable[[RunData], Figure | None], str, str]] = [
    ("Accuracy and reward", figures.quality,
     "Held-out greedy accuracy and training reward against wall time and against dollars spent.",
     "no evaluations or rewards recorded (a simulation has no model to evaluate)"),
    ("Progress", figures.progress, "Learner steps against wall time and against dollars.", "no learner steps recorded"),
    ("Learner utilization", figures.utilization,
     "Busy share of the learner per time bin, and busy / (busy + idle) so far.", "no learner steps recorded"),
    ("Staleness", figures.staleness, "Trained groups by how many versions behind the learner they were generated.",
     "no staleness counts recorded"),
    ("Dissemination", figures.dissemination, "Publish until the last worker holds the version.",
     "no dissemination latencies recorded"),
    ("Timeline", figures.timeline,
     "The first minute: learner steps against each worker's generation and weight fetches, and each version's "
     "dissemination.", "no timeline recorded"),
    ("Cost by worker class", figures.costs, "Dollars by worker class and for the learner.",
     "no prices set for this run (activation.learner_price_per_hour, emulation.fleet[].price_per_hour)"),
    ("Where distributing pays", figures.payoff,
     "The dollars ratio (distributed / centralized) over the workers' price per trained token relative to the "
     "co-located learner's and the baseline's share of a step spent generating, at this run's learner "
     "utilization: (1 - g) / U + rho g (docs/simulation.md). Below the bold line distributing pays.",
     "a simulated run with a centralized baseline has this map (echo2 simulate)"),
]


def png_data_uri(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _table(rows: list[tuple[str, object]], header: tuple[str, str] = ("", "")) -> str:
    cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td class='num'>{html.escape(_fmt(v))}</td></tr>"
                    for k, v in rows)
    return f"<table><tr><th>{header[0]}</th><th>{header[1]}</th></tr>{cells}</table>"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def headline(run: RunData) -> list[tuple[str, object]]:
    steps = run.steps
    if not steps:
        return []
    last = steps[-1]
    rows: list[tuple[str, object]] = [
        ("learner steps", last["version"]),
        ("wall time after the first batch (s)", last["learner_busy_s"] + last["learner_idle_s"]),
        ("learner utilization", last["utilization"]),
    ]
    if staleness := run.staleness_counts():
        rows.append(("mean staleness (versions)", sum(lag * n for lag, n in staleness.items()) / sum(staleness.values())))
    spans = [r["dissemination_max_s"] for r in steps if "dissemination_max_s" in r]
    if spans:
        rows.append(("mean dissemination latency (s)", sum(spans) / len(spans)))
    if run.priced:
        rows += [("cost ($)", last["cost_usd"]), ("cost per step ($)", last["cost_usd"] / last["version"])]
        if last.get("cost_centralized_usd", 0) > 0:
            rows.append(("centralized baseline at equal steps ($)" if run.simulated else
                         "centralized counterfactual: rollout hours at the learner's price ($)",
                         last["cost_centralized_usd"]))
    if run.evals:
        rows += [("held-out accuracy, first eval", run.evals[0]["eval_accuracy"]),
                 ("held-out accuracy, last eval", run.evals[-1]["eval_accuracy"])]
    return rows


def reliability_rows(reliability: dict) -> list[tuple[str, object]]:
    rows = []
    for key, value in reliability.items():
        if isinstance(value, dict):
            rows += [(f"{key}: {reason}", count) for reason, count in value.items()] or [(key, 0)]
        else:
            rows.append((key, value))
    return rows


def render(run: RunData) -> str:
    kind = (f"simulated run (echo2 simulate, scenario {html.escape(str(run.simulation.get('scenario')))})"
            if run.simulated else "real run (echo2 train)")
    parts = [(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>echo2 report: "
              f"{html.escape(run.run_dir.name)}</title><style>{STYLE}</style></head><body>"),
             f"<h1>echo2 run report: {html.escape(run.run_dir.name)}</h1><p class='kind'>{kind}</p>",
             "<h2>Summary</h2>", _table(headline(run), ("", "value")),
             f"<pre>{html.escape(run.summary_text)}</pre>" if run.summary_text else ""]
    for title, figure, caption, missing in SECTIONS:
        parts.append(f"<h2>{title}</h2>")
        fig = figure(run)
        if fig is None:
            parts.append(f"<p class='missing'>{html.escape(missing)}</p>")
        else:
            parts.append(f"<p>{caption}</p><img alt='{title}' src='{png_data_uri(fig)}'>")
    parts.append("<h2>Reliability</h2>")
    parts.append(_table(reliability_rows(run.reliability), ("", "count")) if run.reliability
                 else "<p class='missing'>no reliability.json in this run directory</p>")
    if run.config_text:
        parts.append(f"<h2>Configuration</h2><pre>{html.escape(run.config_text)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Render ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``)."""
    out = out or run_dir / "report.html"
    out.write_text(render(load_run(run_dir)))
    return out
