"""``echo2 report``: one self-contained HTML file with embedded figures and the reliability table."""

import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO
from report_support import images, real_run_dir

from echo2.cli import main
from echo2.report.html import SECTIONS, write_report


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


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="headless Chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    run = real_run_dir(tmp_path / "run")
    shot = tmp_path / "report.png"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "report_screenshot.py"), str(run), "--out",
                             str(shot)], check=False, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_simulated_run_report_says_what_a_simulation_cannot_show(tmp_path):
    scenario = REPO / "configs" / "scenarios" / "qwen3-8b-256w-wan.yaml"
    assert main(["simulate", "--out", str(tmp_path / "sim"), str(scenario), "recipe.run.steps=30"]) == 0
    assert main(["report", str(tmp_path / "sim")]) == 0
    page = (tmp_path / "sim" / "report.html").read_text()
    assert "simulated run (echo2 simulate" in page and "a simulation has no model to evaluate" in page
    assert len(images(page)) == len(SECTIONS) - 1
    assert "<td>workers_dead</td>" in page and "centralized baseline at equal steps" in page
    assert "alt='Where distributing pays'" in page and "(1 - g)/U + rho g" in page

