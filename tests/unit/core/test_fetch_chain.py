"""The fetch chain's rules (:mod:`echo2.core.fetch_chain`), driven alone (no threads, no sockets),
and a wrong rule in it shown to change both the live downloader and the simulated fetches."""

import pytest

from echo2.core.fetch_chain import SourceChain, default_patience_s


def test_a_failed_source_is_left_for_the_next_and_the_learner_is_retried():
    chain = SourceChain(["parent", "grandparent", "learner"], patience_s=8.0, now=0.0)
    assert chain.source == "parent"
    assert chain.fail(0, now=1.0) == "moved" and chain.source == "grandparent"
    assert chain.fail(0, now=1.1) == "behind" and chain.source == "grandparent"  # another thread moved it
    assert chain.fail(1, now=2.0) == "moved" and chain.source == "learner"
    assert chain.fail(2, now=3.0) == "retry" and chain.source == "learner"  # no further source
    with pytest.raises(ValueError, match="at least one source"):
        SourceChain([], patience_s=1.0, now=0.0)


def test_a_source_saying_not_yet_is_kept_while_its_own_progress_grows():
    chain = SourceChain(["parent", "learner"], patience_s=8.0, now=0.0)
    chain.not_yet(0, held=2, now=5.0)
    assert chain.held(0) == 2 and not chain.impatient(0, now=12.9)
    chain.not_yet(0, held=2, now=12.0)  # no new chunk: no progress
    assert chain.impatient(0, now=13.0) and chain.idle_s(0, now=13.0) == pytest.approx(8.0)
    chain.progressed(0, now=13.0)  # bytes arrived
    assert not chain.impatient(0, now=20.0)
    assert chain.fail(0, now=21.0) == "moved" and not chain.impatient(1, now=28.9)  # the next one's patience starts now


def test_patience_is_twice_the_stall_budget():
    assert default_patience_s(stall_s=6.0, poll_s=2.0) == 16.0
