"""Every number and name a worker sends is validated where it enters (security holes: an infinite
timeline time broke the dashboard and the run directory for good; a newline in a worker name forged
log lines; two live workers under one name overwrote each other's metrics; a worker called itself
``learner``)."""

import math

import pytest
from fastapi.testclient import TestClient
from state_support import make_state

from echo2.coordinator.app import create_app
from echo2.protocol import AUTH_HEADER


@pytest.fixture()
def client():
    state = make_state(staleness=1)
    return state, TestClient(create_app(state, lease_wait_s=0))


def register(client, name: str):
    return client.post("/v1/register", json={"name": name}, headers={AUTH_HEADER: "t"})


@pytest.mark.parametrize("name", ["gpu-1\nquarantined worker local-1", "a b", "<script>", "x" * 65, "learner",
                                  "-leading-dash"])
def test_unsafe_or_reserved_names_are_refused(client, name):
    state, http = client
    response = register(http, name)
    assert response.status_code == 422, response.text
    assert any(why in response.text for why in ("a worker name is", "the learner's own name", "at most 64"))
    assert state.registry.records() == []


def test_a_plain_host_name_is_accepted(client):
    assert register(client[1], "node-7.cluster.local").status_code == 200


def test_two_live_workers_never_share_a_name(client):
    state, http = client
    first, second = register(http, "gpu-1").json(), register(http, "gpu-1").json()
    names = {state.registry.workers[r["worker_id"]].name for r in (first, second)}
    assert names == {"gpu-1", "gpu-1#2"}


@pytest.mark.parametrize("event", [
    {"kind": "generate", "start": 1.0, "end": math.inf, "version": 0},
    {"kind": "generate", "start": math.nan, "end": 2.0, "version": 0},
    {"kind": "fetch", "start": -math.inf, "end": 2.0, "version": 0},
    {"kind": "generate", "start": 5.0, "end": 2.0, "version": 0},
    {"kind": "generate", "start": 1.0, "end": 2.0, "version": -1},
])
def test_non_finite_or_disordered_timeline_events_are_refused(client, event):
    import json

    http = client[1]
    session = register(http, "w").json()["session_token"]
    body = json.dumps({"version": 0, "events": [event]})  # json writes NaN / Infinity as JavaScript does
    response = http.post("/v1/heartbeat", content=body, headers={AUTH_HEADER: session,
                                                                  "content-type": "application/json"})
    assert response.status_code == 422, response.text


def test_an_infinite_upload_rate_is_refused(client):
    import json

    session = register(client[1], "w").json()["session_token"]
    body = json.dumps({"version": 0, "upload_bytes_per_s": math.inf})
    response = client[1].post("/v1/heartbeat", content=body, headers={AUTH_HEADER: session,
                                                                       "content-type": "application/json"})
    assert response.status_code == 422


def heartbeat(http, session: str, body: dict):
    import json

    return http.post("/v1/heartbeat", content=json.dumps(body), headers={AUTH_HEADER: session,
                                                                         "content-type": "application/json"})


@pytest.mark.parametrize("body, status, why", [
    ({"version": 10**30}, 409, "newer than the published"),
    ({"version": 0, "events": [{"kind": "fetch", "start": 1.0, "end": 2.0, "version": 7}]}, 409,
     "newer than the published"),
    ({"version": 0, "events": [{"kind": "generate", "start": 1e308, "end": 1e308, "version": 0}]}, 422,
     "from the coordinator's clock"),
    ({"version": 0, "events": [{"kind": "generate", "start": 0.0, "end": 1.0, "version": 0}]}, 422,
     "from the coordinator's clock"),
    ({"version": 0, "upload_bytes_per_s": 1e300}, 422, "less than or equal to"),
])
def test_absurd_finite_numbers_in_a_heartbeat_are_refused(client, body, status, why):
    """Finite but impossible: a version no learner published, a time centuries away, a rate no
    network carries. Each is refused with a reason, and the worker's record is left as it was."""
    state, http = client
    session = register(http, "w").json()["session_token"]
    response = heartbeat(http, session, body)
    assert response.status_code == status, response.text
    assert why in response.text
    record = state.registry.records()[0]
    assert record.version == 0 and record.fetches == 0 and record.upload_bytes_per_s is None


def test_an_honest_heartbeat_with_a_fetch_is_recorded(client):
    import time

    state, http = client
    session = register(http, "w").json()["session_token"]
    now = time.time()
    response = heartbeat(http, session, {"version": 0, "upload_bytes_per_s": 1e8,
                                         "events": [{"kind": "fetch", "start": now - 1, "end": now, "version": 0}]})
    assert response.status_code == 200, response.text
    record = state.registry.records()[0]
    assert record.fetches == 1 and record.upload_bytes_per_s == 1e8


@pytest.mark.parametrize("body, field", [
    ({"version": "0"}, "version"),
    ({"version": True}, "version"),
    ({"version": 0.0}, "version"),
    ({"version": 0, "upload_bytes_per_s": "1e8"}, "upload_bytes_per_s"),
    ({"version": 0, "events": [{"kind": "fetch", "start": "1.0", "end": 2.0, "version": 0}]}, "start"),
])
def test_a_number_sent_in_another_type_is_refused_with_its_field_not_coerced(client, body, field):
    """Strict wire types: ``"0"``, ``true`` or ``0.0`` where an integer belongs, a number sent as a
    string: each a 422 naming the field (lax parsing took ``true`` for version 1 and ``"1e8"`` for
    a rate), the record left as it was."""
    state, http = client
    session = register(http, "w").json()["session_token"]
    response = heartbeat(http, session, body)
    assert response.status_code == 422, response.text
    assert field in response.text
    record = state.registry.records()[0]
    assert record.version == 0 and record.fetches == 0 and record.upload_bytes_per_s is None
