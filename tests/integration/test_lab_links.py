"""The network lab itself: kernel-shaped links, NAT that refuses inbound connections, silent and
refusing partitions that heal, and nothing left behind, even when its maker is killed."""

from __future__ import annotations

import time

from lab_support import (
    lab,  # noqa: F401 (fixtures)
    probe,
    sink,
)


def test_links_are_shaped_by_the_kernel_in_each_direction(lab):
    """5 MB up a 40 Mbit/s uplink takes ~1 s; the same down an 80 Mbit/s downlink ~0.5 s."""
    outcome, up_s = probe(lab, "w1", lab.address("learner"), 5_000_000, timeout_s=10)
    assert outcome == "ok" and 0.85 < up_s < 1.5, up_s
    server = sink(lab, "w1")
    try:
        time.sleep(0.5)
        outcome, down_s = probe(lab, "learner", lab.address("w1"), 5_000_000, timeout_s=10)
    finally:
        server.kill()
    assert outcome == "ok" and 0.4 < down_s < 0.8, down_s


def test_partitions_drop_silently_or_refuse_and_heal(lab):
    learner = lab.address("learner")
    with lab.partition("w1"):
        outcome, seconds = probe(lab, "w1", learner, timeout_s=1.5)
        assert outcome == "TimeoutError" and seconds >= 1.4  # dropped without a word
        assert probe(lab, "w2", learner)[0] == "ok"
    with lab.partition("w1", mode="reject"):
        outcome, seconds = probe(lab, "w1", learner)
        assert outcome != "ok" and seconds < 0.5  # refused at once
    with lab.partition("w2", "learner"):
        assert probe(lab, "w2", learner, timeout_s=1.0)[0] == "TimeoutError"
        assert probe(lab, "w1", learner)[0] == "ok"  # only that pair is cut
    assert probe(lab, "w1", learner)[0] == "ok" and probe(lab, "w2", learner)[0] == "ok"
