"""Tenants of one training service: every key is a tenant, and another key's ids are unknown.

Alice trains, saves and samples; Bob, holding a key of his own, names each of her ids in every
route that takes one. Each is answered as an unknown id would be (no oracle of what exists), and
nothing of hers changes: her adapter scores her datum as before, her save and session live on.
What one key may hold is bounded (sessions, training clients; a memory budget, unit-tested).
"""

import os

import httpx
import numpy as np
import pytest
import tinker
from service_support import Served
from tinker import types

from echo2.model.sources import SHIPPED_MODEL
from echo2.service.budget import MemoryBudget
from echo2.service.keys import ApiKeys
from echo2.service.turns import RequestError

os.environ.setdefault("TINKER_TELEMETRY", "0")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    service = Served(tmp_path_factory.mktemp("tenants"), "workers.count=1", "service.max_clients_per_key=2")
    yield service
    service.close()


def scored(trainer, datum) -> np.ndarray:
    return trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()


def test_another_keys_ids_are_unknown_and_nothing_of_theirs_changes(served):
    alice = served.client()
    trainer = alice.create_lora_training_client(base_model=SHIPPED_MODEL, rank=2).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]),
                        loss_fn_inputs={"target_tokens": [4, 5, 6], "weights": [1.0, 1.0, 1.0]})
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    save = trainer.save_state("mine").result().path
    sampler = trainer.save_weights_and_get_sampling_client().result()
    sampling_session = sampler._sampling_session_id
    before = scored(trainer, datum)
    model_id, session_id = trainer.model_id, alice.holder.get_session_id()
    future = httpx.post(f"{served.url}/api/v1/get_info", json={"model_id": model_id},
                        headers={"X-API-Key": served.key}, timeout=10)
    assert future.status_code == 200

    bob_key = ApiKeys(served.folder).issue("bob")
    bob = httpx.Client(base_url=f"{served.url}/api/v1", headers={"X-API-Key": bob_key}, timeout=30)
    bob_session = bob.post("/create_session", json={"tags": [], "user_metadata": None, "sdk_version": "0.38.0"}).json()
    fb_body = tinker.proto.request_conv.forward_backward_request_to_proto(types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy"),
        model_id=model_id, seq_id=90)).SerializeToString()
    unknown_client = [
        bob.post("/get_info", json={"model_id": model_id}),
        bob.post("/forward_backward", content=fb_body, headers={"Content-Type": "application/x-protobuf"}),
        bob.post("/optim_step", json={"model_id": model_id, "seq_id": 91, "adam_params": {"learning_rate": 1.0}}),
        bob.post("/save_weights", json={"model_id": model_id, "seq_id": 92, "path": "mine", "overwrite": True}),
        bob.post("/unload_model", json={"model_id": model_id}),
        bob.post("/load_weights", json={"model_id": model_id, "seq_id": 93, "path": save, "optimizer": False})]
    for answer in unknown_client:
        assert answer.status_code == 400 and "no training client" in answer.json()["detail"], answer.text
    unknown_save = [
        bob.post("/load_weights", json={"session_id": bob_session["session_id"], "model_seq_id": 0, "path": save,
                                        "optimizer": True, "base_model": SHIPPED_MODEL}),
        bob.post("/weights_info", json={"tinker_path": save}),
        bob.post("/create_sampling_session", json={"session_id": bob_session["session_id"], "sampling_session_seq_id": 0,
                                                   "model_path": save})]
    for answer in unknown_save:
        assert answer.status_code == 400 and "no checkpoint at" in answer.json()["detail"], answer.text
    sampling = bob.post("/asample", json={"sampling_session_id": sampling_session, "num_samples": 1,
                                          "prompt": types.ModelInput.from_ints([3, 4]).model_dump(mode="json"),
                                          "sampling_params": {"max_tokens": 2}, "seq_id": 0})
    assert sampling.status_code == 400 and "no sampling session" in sampling.json()["detail"]
    assert bob.get(f"/samplers/{sampling_session}").status_code == 404
    assert bob.get(f"/training_runs/{model_id}").status_code == 404
    assert bob.post("/session_heartbeat", json={"session_id": session_id}).status_code == 410
    bob.post(f"/sessions/{session_id}/finish").raise_for_status()  # a no-op on another key's session
    for request_id in ("req-1", "req-2", "req-3"):
        assert bob.post("/retrieve_future", json={"request_id": request_id}).status_code == 410

    assert np.array_equal(scored(trainer, datum), before)  # her adapter as it was
    assert len(sampler.sample(types.ModelInput.from_ints([3, 4]), 1, types.SamplingParams(max_tokens=2)).result(
        timeout=120).sequences) == 1
    assert trainer.load_state(save).result() is not None  # her save is still hers


def test_a_key_holds_at_most_its_share_of_training_clients_and_a_revoked_key_nothing(served):
    carol_key = ApiKeys(served.folder).issue("carol")
    carol = tinker.ServiceClient(base_url=served.url, api_key=carol_key)
    for _ in range(2):
        carol.create_lora_training_client(base_model=SHIPPED_MODEL, rank=1).result()
    with pytest.raises(tinker.BadRequestError, match="service.max_clients_per_key"):
        carol.create_lora_training_client(base_model=SHIPPED_MODEL, rank=1).result()
    served.client().create_lora_training_client(base_model=SHIPPED_MODEL, rank=1).result()  # another key is not held back
    ApiKeys(served.folder).revoke("carol")
    answer = httpx.post(f"{served.url}/api/v1/create_session", json={}, headers={"X-API-Key": carol_key}, timeout=10)
    assert answer.status_code == 401


def test_a_client_past_the_memory_budget_is_refused_naming_it():
    resident = [900 * 2**20]
    budget = MemoryBudget(1.0, client_bytes=lambda: 100 * 2**20, resident=lambda: resident[0])
    budget.admit()  # 900 + 100 MB fits 1 GB
    resident[0] += 50 * 2**20
    with pytest.raises(RequestError, match="service.memory_budget_gb=1.00"):
        budget.admit()
