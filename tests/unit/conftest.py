"""Unit tests: pure logic in memory, each call within 2 s; one folder per package."""

from pathlib import Path

import pytest
from tiers import mark_tier


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "unit")
