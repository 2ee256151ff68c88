"""The coordinator's version book: when a version counts as disseminated, and what is pruned."""

from echo2.broadcast.topology import Node, star_plan
from echo2.coordinator.versions import VersionBook
from echo2.protocol import VersionInfo

WORKERS = [Node("a", 1e6), Node("b", 1e6)]


def _book() -> VersionBook:
    return VersionBook(star_plan, staleness=1)


def test_version_is_disseminated_only_once_every_live_worker_holds_it():
    book = _book()
    book.publish(VersionInfo(version=1, sha256="hash1", size_bytes=10), WORKERS)
    book.loaded(1, "a", at=book.published_at[1] + 2.0)
    assert book.pop_disseminated([1, 0]) == []  # b still on version 0
    assert book.spreading()
    book.loaded(1, "b", at=book.published_at[1] + 3.0)
    [(version, published, last)] = book.pop_disseminated([1, 1])
    assert version == 1 and last - published == 3.0
    assert not book.spreading()
    assert book.pop_disseminated([1, 1]) == []  # reported once


def test_version_every_worker_skipped_is_dropped_without_a_latency():
    book = _book()
    book.publish(VersionInfo(version=1, sha256="hash1", size_bytes=10), WORKERS)
    book.publish(VersionInfo(version=2, sha256="hash2", size_bytes=10), WORKERS)
    book.loaded(2, "a", at=book.published_at[2] + 1.0)
    book.loaded(2, "b", at=book.published_at[2] + 1.5)
    assert [v for v, _, _ in book.pop_disseminated([2, 2])] == [2]  # version 1: nobody loaded it
    assert not book.spreading()


def test_old_versions_are_pruned_beyond_the_staleness_window():
    book = _book()
    for version in range(1, 6):
        book.publish(VersionInfo(version=version, sha256=f"hash{version}", size_bytes=10), WORKERS)
    assert sorted(book.published) == [3, 4, 5]  # newest S + 2
