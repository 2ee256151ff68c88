"""The benchmarks' --quick variants run and write their table, results.json and plot."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_staleness_bench_quick(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "staleness.py"), "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert {(r["protocol"], r["S"], r["fetch_delay_s"] > 0) for r in rows} == {
        ("sync", 0, False), ("async", 1, False), ("sync", 0, True), ("async", 1, True)}
    for row in rows:
        assert row["steps"] == 6 and 0 < row["learner_util"] <= 1 and row["samples_per_s"] > 0
    assert "speedup_vs_sync" in result.stdout and (tmp_path / "staleness.png").stat().st_size > 10_000
