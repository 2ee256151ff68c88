"""Integration tests: real processes, servers or model runs on loopback, each call within 120 s."""

from pathlib import Path

import pytest
from tiers import mark_tier


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "integration")
