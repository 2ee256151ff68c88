"""The dashboard tests' coordinator over TLS and the credential a dashboard viewer presents."""

from __future__ import annotations

import pytest
from state_support import make_state
from tls_support import self_signed

from echo2.coordinator.app import create_app
from echo2.coordinator.server import CoordinatorServer
from echo2.net.guard import viewer_credential

RUN_TOKEN = "t"  # make_state's
VIEWER = viewer_credential(RUN_TOKEN)


# ---------------------------------------------------------------------- in a browser
@pytest.fixture()
def tls_coordinator(tmp_path):
    cert, key = self_signed(tmp_path)
    state = make_state(staleness=1)
    for name in ("gpu-a", "gpu-b"):
        state.members.register(name, price_per_hour=1.0)
    server = CoordinatorServer(create_app(state, lease_wait_s=0), "127.0.0.1", 0, certfile=cert, keyfile=key)
    server.start(10)
    yield server, cert
    server.stop()

