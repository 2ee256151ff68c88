"""The live dashboard: its data route opens to the viewer credential and the run token only, shows
the coordinator's books and the learner's files without a credential in them, and its page,
served open and self-contained, follows a real run in headless Chromium (over TLS too)."""

import json
import re
from pathlib import Path

import pytest
from dashboard_screenshot import browse, dashboard_data, dashboard_link, start_run, wait_until  # noqa: E402
from dashboard_support import (
    VIEWER,
    tls_coordinator,  # noqa: F401 (fixtures)
)

from echo2.config import load_config
from echo2.launch.train import DASHBOARD_FILE
from echo2.net.guard import viewer_credential

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium is not installed")


@needs_chromium
def test_chromium_renders_the_dashboard_over_tls(tls_coordinator):
    server, _ = tls_coordinator
    dom = browse(f"{server.url}/dashboard#token={VIEWER}", "--ignore-certificate-errors", "--dump-dom")
    assert 'data-worker="gpu-a"' in dom and 'data-worker="gpu-b"' in dom and "live, updated" in dom
    assert VIEWER not in dom  # nothing on the page shows the credential


def shown_step(dom: str) -> int:
    return int(re.search(r'<span id="step">(\d+)</span>', dom).group(1))


@needs_chromium
def test_the_dashboard_follows_a_real_run_in_headless_chromium(tmp_path):
    config = load_config(overrides=[
        f"run.dir={tmp_path}", "run.name=run", "run.steps=40", "learner.groups_per_step=8", "eval.every=10",
        "eval.size=50", "telemetry.progress=false", "telemetry.tensorboard=false", "checkpoint.every=0"])
    thread, done, outcome = start_run(config)
    try:
        link = dashboard_link(tmp_path / "run", done)
        assert link is not None, outcome
        wait_until(link, lambda data: data["version"] >= 3 and len(data["workers"]) == 2, done)
        first = browse(link, "--dump-dom")
        wait_until(link, lambda data: data["version"] >= shown_step(first) + 3, done)
        second = browse(link, "--dump-dom")
        data = dashboard_data(link)
    finally:
        thread.join(900)
    assert "summary" in outcome, outcome
    for dom in (first, second):
        assert 'data-worker="local-0"' in dom and 'data-worker="local-1"' in dom
        assert "<svg" in dom and "live, updated" in dom
    assert 3 <= shown_step(first) < shown_step(second) <= 40
    charts = [re.search(r'<div id="quality">(.*?)</div>', dom).group(1) for dom in (first, second)]
    assert charts[0] != charts[1] and "<path" in charts[1]  # the reward curve grew
    assert re.search(r'<span id="steps-total"> / 40</span>', second)
    util = [re.search(r'<div class="v" id="util">([^<]+)</div>', dom).group(1) for dom in (first, second)]
    assert all(u.endswith("%") for u in util)
    run_dir = tmp_path / "run"
    token = json.loads((run_dir / "coordinator.json").read_text())["token"]
    for seen in (first, second, json.dumps(data)):
        assert token not in seen and viewer_credential(token) not in seen
    assert viewer_credential(token) not in (run_dir / "train.log").read_text()
    assert (run_dir / DASHBOARD_FILE).stat().st_mode & 0o077 == 0
