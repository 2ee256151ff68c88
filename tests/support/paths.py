"""The repository's folders, for tests that read its configs, sources, examples and test data."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "src" / "echo2"
DATA = REPO / "tests" / "data"
