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


def test_a_version_lists_the_kept_versions_before_it_with_their_deltas_for_catching_up():
    book = _book()
    book.publish(VersionInfo(version=1, sha256="hash1", size_bytes=10), WORKERS)  # the first: no delta
    for version in range(2, 6):
        book.publish(VersionInfo(version=version, sha256=f"hash{version}", size_bytes=10,
                                 delta_sha256=f"delta{version}", delta_bytes=3), WORKERS)
    info = book.info_for(5, "a", {})
    assert [(s.version, s.sha256, s.delta_sha256) for s in info.catch_up] == [(3, "hash3", "delta3"),
                                                                              (4, "hash4", "delta4")]
    assert info.version == 5 and info.sources == ["learner"]
