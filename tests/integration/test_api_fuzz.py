"""The coordinator's HTTP API fuzzed from its own OpenAPI schema: no 5xx, and no way in without
credentials (schemathesis generates the requests; hypothesis keeps the run short)."""

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from state_support import make_state

from echo2.broadcast.publisher import Publisher
from echo2.config import BroadcastConfig
from echo2.coordinator.app import create_app
from echo2.coordinator.dashboard import PAGE_PATH
from echo2.net.guard import broadcast_credential, viewer_credential
from echo2.protocol import AUTH_HEADER

RUN_TOKEN = "t"


def build_app():
    state = make_state(staleness=1)
    app = create_app(state, lease_wait_s=0)
    Publisher(BroadcastConfig(), keep_versions=3, token=RUN_TOKEN).mount(app)
    return app, state


APP, STATE = build_app()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
FUZZED = STATE.members.register("fuzzed")
FUZZED.proven = True  # a worker that has delivered: the fuzz reaches the handlers, not the newcomers' shared 429
SESSION = FUZZED.session_token
OPEN_ROUTES = {"/v1/health"}
#: Every credential a client could present: none at all, junk, and each real credential of the run,
#: which opens its own door and no other (``absent``: the header is not sent).
CREDENTIALS = {"absent": None, "empty": "", "junk": "not-a-credential", "run token": RUN_TOKEN,
               "session": SESSION, "broadcast": broadcast_credential(RUN_TOKEN), "viewer": viewer_credential(RUN_TOKEN)}


def admitted(path: str) -> set[str]:
    """The credentials that open ``path`` (see ``authorize`` in echo2.coordinator.app)."""
    if path == "/v1/register":
        return {"run token"}
    if path == "/v1/dashboard":
        return {"viewer", "run token"}
    if path.startswith("/v1/broadcast/"):
        return {"broadcast"}
    return {"session"}


@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_authenticated_requests_never_cause_a_server_error(case):
    response = case.call(headers={AUTH_HEADER: SESSION})
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:300])


@SCHEMA.parametrize()
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
def test_requests_without_the_right_credential_are_refused_before_the_body_is_validated(case):
    """Catches a guard that lets a request through without a valid credential (or with another
    door's credential): the route's own checks would then answer 422 for the fuzzed body, or 401
    only after validating it. The guard's refusal is a 401 with ``Connection: close``, whatever the
    body, sent before the app runs; the open routes answer anyone."""
    generated = {k: v for k, v in (case.headers or {}).items() if k.lower() != AUTH_HEADER.lower()}
    opened = case.path in OPEN_ROUTES
    for name, credential in CREDENTIALS.items():
        if not opened and name in admitted(case.path):
            continue  # the first test covers the right credential (and would long-poll chunks here)
        case.headers = dict(generated) if credential is None else {**generated, AUTH_HEADER: credential}
        response = case.call()
        what = (case.method, case.formatted_path, name, response.status_code, response.text[:200])
        if opened:  # answered whatever the credential (405: a method the schema does not list)
            assert response.status_code == (200 if case.method.upper() == "GET" else 405), what
        else:
            assert response.status_code == 401, what  # not 422 (validated first), not 5xx, not let in
            assert response.json()["code"] == "unauthorized" and response.headers["connection"] == ["close"], what


def test_open_routes_answer_without_a_credential():
    """Liveness, the schema (which the fuzz tests read) and the dashboard's page stay open."""
    client = TestClient(APP)
    assert client.get("/v1/health").json()["ok"] is True
    assert client.get("/openapi.json").json()["info"]["title"] == "echo2 coordinator"
    page = client.get(PAGE_PATH)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
