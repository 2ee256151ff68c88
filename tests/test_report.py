"""``echo2 report``: one self-contained HTML file with embedded figures and the reliability table."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from echo2.cli import main
from echo2.report.data import load_run
from echo2.report.html import SECTIONS, render, write_report

ROOT = Path(__file__).resolve().parent.parent


def real_run_dir(path: Path, steps: int = 12) -> Path:
    """A synthetic ``echo2 train`` run directory: per-step records, evaluations, intervals, the books."""
    path.mkdir()
    start = 1_800_000_000.0
    records = [{"step": 0, "time": start, "version": 0, "eval_accuracy": 0.40, "eval_sampled_reward": 0.3}]
    timeline = []
    busy = idle = 0.0
    for step in range(1, steps + 1):
        t0 = start + step
        busy, idle = busy + 0.7, idle + 0.3
        timeline += [{"who": "learner", "kind": "train", "start": t0 - 0.7, "end": t0, "version": step},
                     {"who": "local-0", "kind": "generate", "start": t0 - 0.9, "end": t0 - 0.5, "version": step - 1},
                     {"who": "broadcast", "kind": "disseminate", "start": t0, "end": t0 + 0.2, "version": step}]
        record = {"step": step, "time": t0, "version": step, "reward_mean": 0.2 + 0.01 * step,
                  "learner_busy_s": busy, "learner_idle_s": idle, "utilization": busy / (busy + idle),
                  "staleness_count_0": 10, "staleness_count_1": 54, "dissemination_s": 0.2,
                  "dissemination_max_s": 0.2, "cost/rtx4090_usd": 0.001 * step, "cost_learner_usd": 0.002 * step,
                  "cost_usd": 0.003 * step, "cost_centralized_usd": 0.004 * step}
        if step % 4 == 0:
            record.update(eval_accuracy=0.40 + 0.01 * step, eval_sampled_reward=0.3)
        records.append(record)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "timeline.jsonl").write_text("".join(json.dumps(i) + "\n" for i in timeline))
    (path / "reliability.json").write_text(json.dumps({"leases_issued": 50, "leases_completed": 48,
                                                       "leases_expired": 2, "groups_rejected": {"bad_reward": 3},
                                                       "workers_dead": 1}))
    (path / "config.yaml").write_text(yaml.safe_dump({"protocol": "async", "staleness": 1}))
    (path / "summary.txt").write_text("12 steps in 12s | learner utilization 70%\n")
    return path


def images(page: str) -> list[str]:
    return re.findall(r"<img [^>]*src='(data:image/png;base64,[A-Za-z0-9+/=]+)'", page)


@pytest.mark.integration
def test_real_run_report_embeds_every_figure_and_the_reliability_table(tmp_path):
    out = write_report(real_run_dir(tmp_path / "run"))
    page = out.read_text()
    # every section has its figure but the map of where distributing pays (a simulation's: a real run
    # has no centralized baseline of its own)
    assert len(images(page)) == len(SECTIONS) - 1
    assert "a simulated run with a centralized baseline has this map" in page
    assert all(len(uri) > 2000 for uri in images(page))
    for row in ("leases_issued", "leases_expired", "groups_rejected: bad_reward", "workers_dead"):
        assert f"<td>{row}</td>" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained
    assert "centralized baseline at equal steps" not in page and "real run (echo2 train)" in page


def test_simulated_run_report_says_what_a_simulation_cannot_show(tmp_path):
    scenario = ROOT / "configs" / "scenarios" / "qwen3-8b-256w-wan.yaml"
    assert main(["simulate", "--out", str(tmp_path / "sim"), str(scenario), "recipe.run.steps=30"]) == 0
    assert main(["report", str(tmp_path / "sim")]) == 0
    page = (tmp_path / "sim" / "report.html").read_text()
    assert "simulated run (echo2 simulate" in page and "a simulation has no model to evaluate" in page
    assert len(images(page)) == len(SECTIONS) - 1
    assert "<td>workers_dead</td>" in page and "centralized baseline at equal steps" in page
    assert "alt='Where distributing pays'" in page and "(1 - g)/U + rho g" in page


def test_missing_pieces_are_reported_not_guessed(tmp_path):
    run = real_run_dir(tmp_path / "run")
    (run / "reliability.json").unlink()
    (run / "timeline.jsonl").unlink()
    page = render(load_run(run))
    assert "no reliability.json in this run directory" in page
    assert len(images(page)) == len(SECTIONS) - 2  # dissemination falls back to the per-step metrics
    assert "no timeline recorded" in page  # the timeline alone has nothing to draw
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load_run(tmp_path)


def test_a_poisoned_run_directory_still_renders(tmp_path):
    """A worker once put an infinite time into the timeline and ``Infinity`` into metrics.jsonl:
    the report crashed on that run for good. Non-finite numbers, garbage lines and intervals that
    end before they start are left out; the rest still renders."""
    run = real_run_dir(tmp_path / "run")
    with (run / "timeline.jsonl").open("a") as timeline:
        timeline.write('{"who": "evil", "kind": "generate", "start": 1800000001.0, "end": Infinity, "version": 1}\n')
        timeline.write('{"who": "evil", "kind": "generate", "start": NaN, "end": 1.0, "version": 1}\n')
        timeline.write('{"who": "evil", "kind": "fetch", "start": 1800000009.0, "end": 1800000001.0, "version": 1}\n')
        timeline.write('[1, 2, 3]\n')
    with (run / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"step": 13, "time": 1800000013.0, "reward_mean": NaN, "utilization": Infinity}\n')
    data = load_run(run)
    assert all(i["who"] != "evil" for i in data.timeline)
    assert data.records[-1] == {"step": 13, "time": 1800000013.0}
    assert len(images(render(data))) == len(SECTIONS) - 1


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="headless Chromium is not installed")
@pytest.mark.integration
def test_report_renders_in_headless_chromium(tmp_path):
    run = real_run_dir(tmp_path / "run")
    shot = tmp_path / "report.png"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "report_screenshot.py"), str(run), "--out",
                             str(shot)], check=False, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
