"""The suite's rooms (``tests/conftest.py``): every test file in a tier's folder, each unit folder
named for a package of ``src/echo2`` (or ``tree``, ``bench``), and no two test files of one name
(pytest imports them by base name)."""

from paths import REPO, SOURCE

TESTS = REPO / "tests"


def test_every_test_file_is_in_a_tier_folder_and_each_unit_folder_names_a_package():
    files = sorted(TESTS.rglob("test_*.py"))
    tiers = {path.relative_to(TESTS).parts[0] for path in files}
    assert tiers == {"unit", "integration", "live"}, tiers
    packages = {path.name for path in SOURCE.iterdir() if (path / "__init__.py").exists()} | {"tree", "bench"}
    unit = {path.relative_to(TESTS / "unit").parts[0] for path in files if path.is_relative_to(TESTS / "unit")}
    assert unit <= packages, unit - packages
    names = [path.name for path in files]
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)
    assert not list((TESTS / "support").glob("test_*.py")), "support modules hold no tests"
