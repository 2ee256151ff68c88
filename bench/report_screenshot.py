"""Render a run's HTML report in headless Chromium and save a screenshot: the report really displays.

    python bench/report_screenshot.py RUN_DIR [--out PNG]

Writes ``RUN_DIR/report.html`` (``echo2 report``), then opens it with Chromium (``--headless``,
no sandbox, no GPU, no network services) at 1280 px wide and saves the page. Without Chromium
(``apt-get install -y chromium`` on Debian) it says so and exits 0 without a screenshot.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from echo2.report.html import write_report

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(html: Path, out: Path, width: int = 1280, height: int = 4200, timeout_s: float = 120) -> Path:
    """Save a ``width`` x ``height`` screenshot of ``html``; raises if Chromium fails or writes nothing."""
    browser = chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={out.resolve()}",
                        f"--window-size={width},{height}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=timeout_s)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="real or simulated run directory")
    parser.add_argument("--out", type=Path, help="screenshot PNG (default RUN_DIR/report.png)")
    args = parser.parse_args()
    html = write_report(args.run_dir)
    print(f"wrote {html}")
    if chromium() is None:
        print("chromium is not installed (Debian: apt-get install -y chromium); skipping the screenshot")
        return 0
    print(f"wrote {screenshot(html, args.out or args.run_dir / 'report.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
