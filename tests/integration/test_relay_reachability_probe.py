"""The coordinator does not take an advertised relay address at its word: a relay counts once it
answered as its own worker, and one on an address that means "this host" serves its host alone."""

from __future__ import annotations

from relay_reachability_support import (
    check,
    relay,  # noqa: F401 (fixtures)
)


def test_another_workers_relay_or_a_closed_port_does_not_count(relay):
    relay.identity = "w2-def"
    ok, why = check(relay.url, "w1-abc")
    assert not ok and "not as 'w1-abc'" in why
    ok, why = check("http://127.0.0.1:9", "w1-abc")
    assert not ok and "ConnectError" in why
    ok, why = check(relay.url, "w2-def", credential="wrong")
    assert not ok and "401" in why

