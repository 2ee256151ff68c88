"""The coordinator's version book: what is pruned (when a version counts as disseminated:
tests/test_dissemination.py)."""

from echo2.broadcast.topology import Node, star_plan
from echo2.coordinator.versions import VersionBook
from echo2.protocol import VersionInfo

WORKERS = [Node("a", 1e6), Node("b", 1e6)]


def _book() -> VersionBook:
    return VersionBook(star_plan, staleness=1)


def test_old_versions_are_pruned_beyond_the_staleness_window():
    book = _book()
    for version in range(1, 6):
        book.publish(VersionInfo(version=version, sha256=f"hash{version}", size_bytes=10), WORKERS)
    assert sorted(book.published) == [3, 4, 5]  # newest S + 2
