"""How a tier's folder marks its tests (see ``tests/conftest.py``)."""

from pathlib import Path

import pytest


def mark_tier(items: list[pytest.Item], folder: Path, tier: str) -> None:
    """Mark the tests collected under ``folder`` with ``tier``; run before pytest deselects by
    marker, so ``-m unit`` and ``-m "not live"`` see the marks."""
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(getattr(pytest.mark, tier))
