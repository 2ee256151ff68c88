"""Run a short real training and save its live dashboard as headless Chromium shows it mid-run.

    python bench/dashboard_screenshot.py [--out docs/dashboard.png] [--steps 40]

Starts ``echo2 train`` in a thread (the shipped tiny model, two local workers, prices set so that
the cost panel has numbers), waits for the link the run writes to ``RUN_DIR/dashboard.url`` and
for the learner's evaluations at steps 0, 10 and 20, then opens the link with Chromium
(``--headless``, the flags of ``report_screenshot.py``) and saves the page. Without Chromium
(``apt-get install -y chromium`` on Debian) it says so and exits 0. ``tests/integration/test_dashboard_browser.py``
uses its helpers.
"""

from __future__ import annotations

import argparse
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from report_screenshot import CHROMIUM_FLAGS, chromium  # noqa: E402

from echo2.launch.train import DASHBOARD_FILE  # noqa: E402
from echo2.protocol import AUTH_HEADER  # noqa: E402


def browse(url: str, *flags: str, budget_ms: int = 5000, timeout_s: float = 120) -> str:
    """Open ``url`` in headless Chromium, let its scripts run for ``budget_ms`` of virtual time
    (network replies are awaited), and return what Chromium printed (``--dump-dom``: the DOM)."""
    browser = chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed")
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                               f"--virtual-time-budget={budget_ms}", *flags, url],
                              check=True, capture_output=True, text=True, timeout=timeout_s)
    return done.stdout


def dashboard_link(run_dir: Path, done: threading.Event) -> str | None:
    """The run's dashboard link once ``echo2 train`` has written it; None if ``done`` is set first."""
    path = run_dir / DASHBOARD_FILE
    while not (path.exists() and path.read_text().endswith("\n")):
        if done.wait(0.1):
            return None
    return path.read_text().strip()


def start_run(config: Any) -> tuple[threading.Thread, threading.Event, dict[str, Any]]:
    """``run_training(config)`` in a daemon thread: the thread, an event set when it ends, and
    its outcome (``summary`` or ``error``)."""
    from echo2.launch.train import run_training

    done, outcome = threading.Event(), {}

    def train() -> None:
        try:
            outcome["summary"] = run_training(config)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error
        finally:
            done.set()

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    return thread, done, outcome


def dashboard_data(link: str, verify: bool | ssl.SSLContext = True) -> dict[str, Any]:
    """What the page reads: ``/v1/dashboard`` with the link's viewer token."""
    base, _, token = link.partition("/dashboard#token=")
    reply = httpx.get(f"{base}/v1/dashboard", headers={AUTH_HEADER: token}, verify=verify, timeout=10)
    reply.raise_for_status()
    return reply.json()


def wait_until(link: str, ready: Callable[[dict[str, Any]], bool], done: threading.Event, timeout_s: float = 600
               ) -> dict[str, Any]:
    """The dashboard's data once ``ready(data)`` holds; raises if the run ends or time runs out first."""
    deadline = time.monotonic() + timeout_s
    while not ready(data := dashboard_data(link)):
        if done.is_set() or time.monotonic() > deadline:
            raise TimeoutError(f"the run ended or {timeout_s:.0f}s passed first (version {data['version']})")
        time.sleep(0.5)
    return data


def main() -> int:
    from echo2.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    if chromium() is None:
        print("chromium is not installed (Debian: apt-get install -y chromium); skipping the screenshot")
        return 0
    with tempfile.TemporaryDirectory() as runs:
        config = load_config(overrides=[
            f"run.dir={runs}", "run.name=arith-demo", f"run.steps={args.steps}", "learner.groups_per_step=8",
            "eval.every=10", "eval.size=100", "telemetry.progress=false", "telemetry.tensorboard=false",
            "checkpoint.every=0", "activation.learner_price_per_hour=2.0",
            "emulation.fleet=[{price_per_hour: 0.4, worker_class: rtx4090}, {price_per_hour: 0.7, worker_class: l4}]"])
        thread, done, outcome = start_run(config)
        link = dashboard_link(Path(runs) / "arith-demo", done)
        if link is None:
            raise outcome.get("error") or RuntimeError("the run ended before it wrote its dashboard link")
        wait_until(link, lambda data: len(data["accuracy"]) >= 3, done)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        browse(link, f"--screenshot={args.out.resolve()}", "--window-size=1280,1140")
        print(f"wrote {args.out}")
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
