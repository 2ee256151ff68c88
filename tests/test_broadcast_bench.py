"""bench/broadcast.py --quick runs (one process per node) and writes its table, results.json and plot."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_broadcast_bench_quick(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "broadcast.py"), "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert {(r["N"], r["mode"]) for r in rows} == {(n, m) for n in (1, 2, 4) for m in ("star", "pipelined")}
    for row in rows:
        assert row["verified"] and row["failovers"] == 0 and row["ratio_to_bound"] > 0.9
        sent = row["M_mib"] * row["N"] if row["mode"] == "star" else row["M_mib"]  # the header adds a few bytes
        assert sent <= row["root_sent_mib"] < sent * 1.001
    ratio = {(r["N"], r["mode"]): r["ratio_to_bound"] for r in rows}
    assert ratio[(4, "star")] > 3 and ratio[(4, "pipelined")] < ratio[(4, "star")] - 1  # loose: 2 busy cores
    assert "ratio_to_bound" in result.stdout and (tmp_path / "broadcast.png").stat().st_size > 10_000
