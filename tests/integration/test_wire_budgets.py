"""Per-identity budgets on the wire: one worker's floods of requests, heartbeats, timeline events
or long-polls are refused or cut at its own budget, and never take the server from the others
(issue 60: 876 heartbeats a second slowed the learner by half, 100 concurrent long-polls from one
worker to 2%, a swarm's long-polls held every server thread, 7.6 MB/s went into ``timeline.jsonl``)."""

import threading
import time

from fastapi.testclient import TestClient
from state_support import make_state, submit_all, valid_submission

from echo2.coordinator import app as app_module
from echo2.coordinator import work
from echo2.coordinator.app import WORKER_HEARTBEATS, WORKER_REQUESTS, create_app
from echo2.coordinator.membership import TIMELINE_EVENTS
from echo2.net.guard import TARPIT_S
from echo2.protocol import AUTH_HEADER, LeaseResponse


def beat(client: TestClient, record, events=()) -> int:
    return client.post("/v1/heartbeat", json={"version": 0, "events": list(events)},
                       headers={AUTH_HEADER: record.session_token}).status_code


def test_heartbeats_past_a_workers_budget_get_429_and_its_neighbour_is_untouched():
    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=0))
    flooder, honest = state.members.register("flooder"), state.members.register("honest")
    assert [beat(client, flooder) for _ in range(WORKER_HEARTBEATS[0])] == [200] * WORKER_HEARTBEATS[0]
    started = time.monotonic()
    refused = client.post("/v1/heartbeat", json={"version": 0}, headers={AUTH_HEADER: flooder.session_token})
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert float(refused.headers["Retry-After"]) > 0 and time.monotonic() - started >= TARPIT_S  # held: its pace
    assert beat(client, honest) == 200
    assert state.reliability()["requests_rate_limited"] == flooder.rate_limited == 1


def test_requests_of_any_kind_past_a_workers_budget_get_429(monkeypatch):
    # refilled at one a minute here: at the shipped 50 a second, a machine that serves fewer than
    # 50 requests a second never drains the bucket, whatever the limit is worth
    monkeypatch.setattr(app_module, "WORKER_REQUESTS", (WORKER_REQUESTS[0], 1.0))
    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=0))
    flooder = state.members.register("flooder")
    flooder.proven = True  # it has delivered: its own budget, not the newcomers' shared one
    flood = [client.get("/v1/version", headers={AUTH_HEADER: flooder.session_token}) for _ in range(WORKER_REQUESTS[0])]
    assert {response.status_code for response in flood} == {200}
    started = time.monotonic()
    refused = client.get("/v1/version", headers={AUTH_HEADER: flooder.session_token})
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert flooder.rate_limited == 1 and time.monotonic() - started >= TARPIT_S  # and held a second


def test_workers_that_have_delivered_nothing_share_one_budget_and_a_delivering_one_keeps_its_own(monkeypatch):
    """Many identities, each within its own budget, had taken the learner to half its steps: all
    that have delivered nothing share NEWCOMERS_REQUESTS, whoever they are."""
    monkeypatch.setattr(app_module, "NEWCOMERS_REQUESTS", (app_module.NEWCOMERS_REQUESTS[0], 1.0))
    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=0))
    newcomers = [state.members.register(f"newcomer-{i}") for i in range(4)]
    proven = state.members.register("proven")
    proven.proven = True

    def ask(record) -> int:
        return client.get("/v1/version", headers={AUTH_HEADER: record.session_token}).status_code

    burst = app_module.NEWCOMERS_REQUESTS[0]
    assert [ask(newcomers[i % 4]) for i in range(burst)] == [200] * burst  # ten each: far within their own budgets
    started = time.monotonic()
    refused = client.get("/v1/version", headers={AUTH_HEADER: newcomers[0].session_token})
    assert refused.status_code == 429 and "delivered nothing yet share" in refused.json()["detail"]
    assert time.monotonic() - started >= TARPIT_S
    assert ask(proven) == 200 and ask(newcomers[3]) == 429


def test_timeline_events_past_a_workers_budget_are_not_drawn_and_intervals_are_clipped():
    """1000 events in one heartbeat (the protocol's most): the first 200 drawn, the rest counted;
    an interval spanning two days (inside the clock allowance) drawn from the worker's
    registration to now, so the run's timeline is not stretched invisible."""
    drawn = []
    state = make_state(staleness=1, on_interval=lambda *interval: drawn.append(interval))
    client = TestClient(create_app(state, lease_wait_s=0))
    flooder = state.members.register("flooder")
    now = time.time()
    wide = {"kind": "generate", "start": now - 86_000, "end": now + 86_000, "version": 0}
    assert beat(client, flooder, [wide]) == 200
    (_, kind, start, end, _), = drawn
    assert kind == "generate" and flooder.registered_at - 61 <= start and end <= time.time()
    events = [{"kind": "generate", "start": now - 1, "end": now, "version": 0}] * 1000
    assert beat(client, flooder, events) == 200
    burst, refilled = TIMELINE_EVENTS[0], int(TIMELINE_EVENTS[1] / 60 * (time.time() - now)) + 1
    assert burst <= len(drawn) <= burst + refilled  # 1 before, then what was left of the burst (and refilled since)
    assert state.reliability()["timeline_events_dropped"] == 1001 - len(drawn)


def test_a_worker_on_trial_holding_its_lease_is_answered_at_once_not_held_open():
    """Only its own submission or its lease's expiry can change the answer: a long-poll would hold
    a server thread for nothing (a swarm of 256 such identities held all of them)."""
    state = make_state(staleness=1)
    proven, newcomer = state.members.register("proven"), state.members.register("newcomer")
    proven.proven = True  # a group of its was trained
    first = state.work.lease(newcomer, worker_version=0, max_groups=4, wait_s=0)
    assert first.status == "granted" and len(first.prompts) == 1  # on trial: one lent group
    started = time.monotonic()
    again = state.work.lease(newcomer, worker_version=0, max_groups=4, wait_s=5)
    assert again.status == "wait" and again.retry_after_s == 5 and time.monotonic() - started < 1
    assert state.work.long_polls == 0


def test_a_lease_request_before_the_retry_after_it_was_told_gets_429_until_it_submits():
    """A swarm's identities parked or on trial asked every half second whatever they were told:
    asked again before half its ``retry_after_s``, a worker is refused before its body is read
    (429, held a second); its own submission lifts that, since it changes its next answer."""
    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=4.0))
    proven, newcomer = state.members.register("proven"), state.members.register("newcomer")
    proven.proven = True
    headers = {AUTH_HEADER: newcomer.session_token}

    def ask():
        return client.post("/v1/lease", json={"version": 0, "max_groups": 4}, headers=headers)

    first = ask().json()
    assert first["status"] == "granted" and len(first["prompts"]) == 1  # on trial: one lent group
    assert ask().json()["retry_after_s"] == 4.0  # holding it: answered at once, told to wait
    early = ask()
    assert early.status_code == 429 and newcomer.rate_limited == 1 and float(early.headers["Retry-After"]) > 0
    newcomer.ask_again_at -= 2.0  # half of the 4 s it was told has passed
    assert ask().status_code == 200
    assert ask().status_code == 429
    assert state.work.submit(newcomer, valid_submission(LeaseResponse.model_validate(first))).accepted == 1
    assert ask().status_code == 200


def test_one_long_poll_per_worker_and_a_bounded_number_in_all(monkeypatch):
    state = make_state(staleness=0, groups_per_step=2)
    worker = state.members.register("w")
    submit_all(state, worker, state.work.lease(worker, worker_version=0, max_groups=2, wait_s=0))  # window full now
    held = threading.Thread(target=state.work.lease, args=(worker, 0, 2, 3.0), daemon=True)
    held.start()
    deadline = time.monotonic() + 2
    while state.work.long_polls == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.work.long_polls == 1 and worker.polling
    started = time.monotonic()
    second = state.work.lease(worker, worker_version=0, max_groups=2, wait_s=3.0)  # a second one from it: at once
    assert second.status == "wait" and second.retry_after_s == 3.0 and time.monotonic() - started < 1
    other = state.members.register("other")
    monkeypatch.setattr(work, "MAX_LONG_POLLS", 1)  # the one held is all there may be
    started = time.monotonic()
    assert state.work.lease(other, worker_version=0, max_groups=2, wait_s=3.0).retry_after_s == 3.0
    assert time.monotonic() - started < 1
    held.join(5)
    assert state.work.long_polls == 0 and not worker.polling


def test_identities_on_trial_are_bounded_by_the_fleet_that_delivers_whatever_their_addresses():
    """16 seats on trial at least, two more for each worker that has delivered; the 17th newcomer
    is refused with a clear 429 and Retry-After (counted); a missed identity leaves its seat."""
    from echo2.coordinator.membership import TRIAL_SEATS

    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=0))

    def register(name: str):
        return client.post("/v1/register", json={"name": name}, headers={AUTH_HEADER: "t"})

    assert all(register(f"sybil-{i}").status_code == 200 for i in range(TRIAL_SEATS))
    asked = time.monotonic()
    refused = register("one-more")
    assert time.monotonic() - asked >= TARPIT_S  # held a second, as every 429 is: a swarm re-asked at once
    assert refused.status_code == 429 and refused.json()["code"] == "trial_full"
    assert "16 workers are on trial" in refused.json()["detail"] and float(refused.headers["Retry-After"]) > 0
    assert state.reliability()["registrations_refused_trial"] == 1
    records = state.registry.records()
    for record in records[:9]:  # nine deliver: 18 seats, 7 on trial
        record.proven = True
    records[9].unfulfilled = 1  # one missed its lease: parked, no longer on trial
    assert all(register(f"honest-{i}").status_code == 200 for i in range(18 - 6))
    assert register("past-the-seats").status_code == 429
