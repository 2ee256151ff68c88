"""The HTTP API: authentication, validation of submissions (4xx + reason, nothing changed), idempotency."""

import json

import pytest
import torch
from fastapi.testclient import TestClient
from state_support import make_state, valid_submission

from echo2.broadcast.publisher import Publisher
from echo2.broadcast.topology import plan_tree
from echo2.config import BroadcastConfig
from echo2.coordinator.app import MAX_BODY_BYTES, create_app
from echo2.launch.work import reward_scorer
from echo2.model.loading import SHIPPED_MODEL, load_tokenizer
from echo2.net.guard import broadcast_credential
from echo2.protocol import AUTH_HEADER, Completion, GroupResult, LeaseResponse, SubmitRequest
from echo2.tasks import ArithmeticTask


@pytest.fixture()
def setup():
    state = make_state(staleness=1, groups_per_step=2)
    client = TestClient(create_app(state, lease_wait_s=0))
    registration = client.post("/v1/register", json={"name": "w"}, headers={AUTH_HEADER: "t"})
    assert registration.status_code == 200
    headers = {AUTH_HEADER: registration.json()["session_token"]}
    lease = LeaseResponse.model_validate(
        client.post("/v1/lease", json={"version": 0, "max_groups": 2}, headers=headers).json())
    assert lease.status == "granted"
    return state, client, headers, lease


def test_register_needs_the_run_token():
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0))
    response = client.post("/v1/register", json={"name": "w"}, headers={AUTH_HEADER: "wrong"})
    assert response.status_code == 401 and "run token" in response.json()["detail"]
    assert client.post("/v1/lease", json={"version": 0, "max_groups": 1}).status_code == 401


@pytest.mark.parametrize("price", ["NaN", "Infinity", "-1", "-1e308", "1e30"])
def test_a_price_activation_could_not_compare_is_refused_at_registration(price):
    """Cost-aware activation ranks workers by their declared price and ends probation by comparing
    it: a price that is not a finite number in [0, 1e4] is refused, and nobody is registered."""
    state = make_state(staleness=1)
    client = TestClient(create_app(state, lease_wait_s=0))
    body = '{"name": "w", "price_per_hour": ' + price + '}'
    response = client.post("/v1/register", content=body,
                           headers={AUTH_HEADER: "t", "content-type": "application/json"})
    assert response.status_code == 422 and "price_per_hour" in json.dumps(response.json()["detail"])
    assert state.books.counters.workers_registered == 0


def _submit(client, headers, body):
    return client.post("/v1/submit", content=body.model_dump_json() if hasattr(body, "model_dump_json") else body,
                       headers={**headers, "content-type": "application/json"})


@pytest.mark.parametrize(
    ("mutate", "status", "reason"),
    [
        (lambda b: b.groups[0].completions[0].token_ids.append(5), 422, "differ in length"),
        (lambda b: b.groups[0].completions[0].__setattr__("token_ids", [99, 1]), 422, "vocabulary"),
        (lambda b: b.groups[0].completions.pop(), 422, "expected 2"),
        (lambda b: b.groups.append(b.groups[0]), 422, "each once"),  # one slot answered twice
        (lambda b: b.groups[0].__setattr__("slot", 999), 422, "open slots"),  # not the lease's
        (lambda b: b.__setattr__("version", 0) or b.__setattr__("lease_id", "nope"), 404, "not one of yours"),
    ],
)
def test_malformed_submit_is_refused_and_changes_nothing(setup, mutate, status, reason):
    state, client, headers, lease = setup
    body = valid_submission(lease)
    mutate(body)
    response = _submit(client, headers, body)
    assert response.status_code == status and reason in response.json()["detail"]
    assert len(state.books.ledger) == 0 and state.leases.get(lease.lease_id).state == "active"


@pytest.mark.parametrize("raw", ['{"lease_id": 1}', "not json", '{"lease_id": "x", "version": -1, "groups": []}'])
def test_ill_formed_json_is_a_422(setup, raw):
    state, client, headers, _ = setup
    response = _submit(client, headers, raw)
    assert response.status_code == 422 and response.json()["detail"]
    assert len(state.books.ledger) == 0


def test_nan_logprob_is_refused(setup):
    state, client, headers, lease = setup
    body = valid_submission(lease).model_dump_json().replace("-0.1", "NaN", 1)
    response = _submit(client, headers, body)
    assert response.status_code == 422 and len(state.books.ledger) == 0


def test_a_lease_carries_prompts_and_never_their_answers():
    state = make_state(staleness=1, groups_per_step=2)
    client = TestClient(create_app(state, lease_wait_s=0))
    session = client.post("/v1/register", json={"name": "w"}, headers={AUTH_HEADER: "t"}).json()["session_token"]
    reply = client.post("/v1/lease", json={"version": 0, "max_groups": 2}, headers={AUTH_HEADER: session}).json()
    assert reply["status"] == "granted" and len(reply["prompts"]) == 2
    assert all(set(prompt) == {"slot", "prompt"} for prompt in reply["prompts"])  # no answer, no hint of one


def test_a_submission_reporting_rewards_is_refused(setup):
    state, client, headers, lease = setup
    body = json.loads(valid_submission(lease).model_dump_json())
    for group in body["groups"]:
        for completion in group["completions"]:
            completion["reward"] = 1.0
    response = _submit(client, headers, json.dumps(body))
    assert response.status_code == 422 and "reward" in response.json()["detail"]
    assert len(state.books.ledger) == 0 and state.leases.get(lease.lease_id).state == "active"


def test_trained_rewards_are_the_tasks_verdict_on_the_decoded_tokens():
    """The run's scorer (the shipped tokenizer, then the task) decides every reward."""
    task, tokenizer = ArithmeticTask(), load_tokenizer(SHIPPED_MODEL)
    state = make_state(staleness=1, groups_per_step=2, score=reward_scorer(task, SHIPPED_MODEL))
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 2, wait_s=0)
    state.limits.group_size, state.limits.max_new_tokens = 4, 16
    groups = []
    for prompt in lease.prompts:
        answer = prompt.prompt.split("+")[0]  # make_state's prompts are "k+0="
        token_ids = [tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
                     for text in (answer, f"<think>{answer}+0={answer}", str(int(answer) + 1), "=")]
        groups.append(GroupResult(slot=prompt.slot, completions=[Completion(token_ids=ids, logprobs=[-0.5] * len(ids))
                                                                 for ids in token_ids]))
    state.work.submit(worker, SubmitRequest(lease_id=lease.lease_id, version=0, groups=groups, generate_seconds=0.1))
    for group in state.take_batch(0, timeout_s=1):
        verdict = [task.reward(group.example, tokenizer.decode(ids, skip_special_tokens=True))
                   for ids in group.token_ids]
        assert group.rewards == verdict
    assert verdict == [1.0, 1.0, 0.0, 0.0]


def test_submission_is_idempotent(setup):
    state, client, headers, lease = setup
    body = valid_submission(lease)
    first, again = _submit(client, headers, body), _submit(client, headers, body)
    assert first.json() == {"accepted": 2, "duplicate": False}
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert len(state.books.ledger) == 2 and state.books.counters.duplicate_submissions == 1


def test_other_workers_cannot_submit_your_lease(setup):
    state, client, _, lease = setup
    other = client.post("/v1/register", json={"name": "x"}, headers={AUTH_HEADER: "t"}).json()["session_token"]
    response = _submit(client, {AUTH_HEADER: other}, valid_submission(lease))
    assert response.status_code == 404 and len(state.books.ledger) == 0


def test_body_size_limit(setup):
    _, client, headers, _ = setup
    response = client.post("/v1/submit", content=b"x" * (MAX_BODY_BYTES + 1), headers=headers)
    assert response.status_code == 413


def test_version_names_the_sources_of_the_plan_and_chunks_are_served():
    state = make_state(staleness=1, planner=lambda nodes, incumbent: plan_tree(nodes, incumbent=incumbent))
    publisher = Publisher(BroadcastConfig(chunk_mib=0.001), keep_versions=3, token="t")
    app = create_app(state, lease_wait_s=0)
    publisher.mount(app)
    client = TestClient(app)
    sessions = []
    for name, relay in [("a", "http://10.0.0.1:7000"), ("b", "http://10.0.0.2:7000"), ("nat", None)]:
        reply = client.post("/v1/register", json={"name": name, "relay_url": relay, "upload_bytes_per_s": 1e6},
                            headers={AUTH_HEADER: "t"}).json()
        sessions.append({AUTH_HEADER: reply["session_token"]})
    published = publisher.publish(1, torch.nn.Linear(8, 8))
    sha, size = published.sha256, published.size_bytes
    state.publish(published)
    sources = [client.get("/v1/version", headers=h).json()["sources"] for h in sessions]
    # a chain learner -> a -> b, and the unreachable worker hangs below b as a leaf
    assert sources == [["learner"], ["http://10.0.0.1:7000", "learner"],
                       ["http://10.0.0.2:7000", "http://10.0.0.1:7000", "learner"]]
    info = client.get("/v1/version", headers=sessions[0]).json()
    assert info["version"] == 1 and info["sha256"] == sha and info["size_bytes"] == size
    chunks = {AUTH_HEADER: broadcast_credential("t")}  # the run's broadcast credential, not its token
    manifest = client.get("/v1/broadcast/1/manifest", headers=chunks).json()
    assert manifest["sha256"] == sha and len(manifest["chunks"]) == -(-size // 1048)
    assert client.get("/v1/broadcast/1/manifest").status_code == 401  # a credential is required
    assert client.get("/v1/broadcast/1/manifest", headers={AUTH_HEADER: "t"}).status_code == 401  # not the token
    # b reports a measured uplink faster than a's: the next version's chain starts with b
    beat = client.post("/v1/heartbeat", json={"version": 1, "upload_bytes_per_s": 5e6}, headers=sessions[1])
    assert beat.status_code == 200
    state.publish(published.model_copy(update={"version": 2}))
    sources = [client.get("/v1/version", headers=h).json()["sources"] for h in sessions]
    assert sources[:2] == [["http://10.0.0.2:7000", "learner"], ["learner"]]
    assert client.get("/v1/broadcast/9/manifest", headers=chunks).status_code in (404, 503)
