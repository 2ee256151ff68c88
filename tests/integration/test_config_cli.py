"""Config loading: overrides, one-line errors naming the key, resolved staleness."""

import subprocess
import sys


def test_cli_prints_one_line_and_exits_2():
    result = subprocess.run([sys.executable, "-m", "echo2.cli", "train", "learner.nope=1"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "echo2: config key 'learner.nope': unknown key"
