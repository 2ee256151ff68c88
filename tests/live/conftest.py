"""Live tests: real runs of a minute or more (network lab, benchmark quick runs, Ray, the tinker cookbook), each call within 400 s."""

from pathlib import Path

import pytest
from tiers import mark_tier


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "live")
