"""The tree passes ruff's pyflakes and isort rules (``[tool.ruff.lint]`` in ``pyproject.toml``):
no unused or undefined name, imports in one order."""

import subprocess
import sys

from paths import REPO


def test_ruff_finds_nothing_in_the_sources_the_tests_and_the_benches():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "src", "tests", "bench"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
