"""The suite's tiers, one folder each, and their time budgets.

- ``tests/unit/<package>/``: pure logic in memory, one folder per package of ``src/echo2`` (and
  ``tree/`` for the rules over the whole source tree, ``bench/`` for the benchmarks' own logic).
  ``pytest tests/unit`` (or ``-m unit``) runs in about a minute.
- ``tests/integration/``: real processes, servers or model runs on loopback: a second or more each.
- ``tests/live/``: real runs of a minute or more (network-lab runs, benchmark quick runs, Ray, the
  tinker cookbook). ``pytest -m "not live"`` skips them.

Each folder's ``conftest.py`` marks its tests with its tier; helpers shared between test files live
in ``tests/support/`` (on ``pythonpath``, so also importable by the processes a test starts).

Each tier has a budget a test's call should keep within (:data:`TIER_BUDGET_S`): the run's summary
lists every test over its tier's (CI's log with it, beside the slowest fifteen), so a test that
grew is seen and moved or cut, not found when the suite passes its 40 minutes.
"""

import time

import pytest

#: Seconds a test's call may take in each tier (setup and teardown apart).
TIER_BUDGET_S = {"unit": 2.0, "integration": 120.0, "live": 400.0}
OVER_BUDGET: list[tuple[str, str, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    started = time.perf_counter()
    yield
    seconds = time.perf_counter() - started
    tier = next((t for t in TIER_BUDGET_S if item.get_closest_marker(t)), None)
    if tier is None:
        raise pytest.UsageError(f"{item.nodeid} is in no tier's folder (tests/unit, tests/integration, tests/live)")
    if seconds > TIER_BUDGET_S[tier]:
        OVER_BUDGET.append((item.nodeid, tier, seconds))


def pytest_terminal_summary(terminalreporter) -> None:
    """The tests over their tier's budget (none: one line saying so)."""
    budgets = ", ".join(f"{tier} {seconds:g} s" for tier, seconds in TIER_BUDGET_S.items())
    if not OVER_BUDGET:
        terminalreporter.write_line(f"every test within its tier's budget ({budgets})")
        return
    terminalreporter.section(f"over their tier's budget ({budgets})")
    for nodeid, tier, seconds in sorted(OVER_BUDGET, key=lambda entry: -entry[2]):
        terminalreporter.write_line(f"{seconds:8.1f}s  {tier:<12} {nodeid}")
