"""The coordinator's HTTP API fuzzed from its own OpenAPI schema: no 5xx, and no way in without
credentials (schemathesis generates the requests; hypothesis keeps the run short)."""

import schemathesis
from conftest import make_state
from hypothesis import HealthCheck, settings

from echo2.broadcast.publisher import Publisher
from echo2.config import BroadcastConfig
from echo2.coordinator.app import create_app
from echo2.protocol import AUTH_HEADER


def build_app():
    state = make_state(staleness=1)
    app = create_app(state, lease_wait_s=0)
    Publisher(BroadcastConfig(), keep_versions=3, token="t").mount(app)
    return app, state


APP, STATE = build_app()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
SESSION = STATE.register("fuzzed").session_token
OPEN_ROUTES = {"/v1/health"}


@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_authenticated_requests_never_cause_a_server_error(case):
    response = case.call(headers={AUTH_HEADER: SESSION})
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:300])


@SCHEMA.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_unauthenticated_requests_are_refused(case):
    response = case.call(headers={AUTH_HEADER: "not-a-credential"})
    assert response.status_code < 500
    if case.path not in OPEN_ROUTES and response.status_code < 400:
        raise AssertionError(f"{case.method} {case.path} answered {response.status_code} without credentials")
