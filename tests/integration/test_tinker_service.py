"""``echo2 serve`` with the real ``tinker`` SDK (pinned 0.38) on loopback: a client's training loop
trains on the service and its sampling runs on worker processes, untrusted.

The routes the cookbook's loops call (``rl_loop``: client config, sessions, heartbeats, LoRA
training clients, info, forward-backward, optimizer steps, saves, saves for a sampler, sampling,
futures; ``rl/train.py`` and resuming: sampling sessions from a path, loads with the optimizer,
training runs), a retried optimizer step applied once, requests run in ``seq_id`` order, a lying
worker caught before its samples reach the client, and a client resuming after the service
restarted.
"""

import json
import os
import socket
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import tinker
import zstandard
from service_support import LosingProxy, Served
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from waiting import wait_for

from echo2.model.sources import SHIPPED_MODEL
from echo2.rollout.worker import RolloutWorker

os.environ.setdefault("TINKER_TELEMETRY", "0")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    service = Served(tmp_path_factory.mktemp("service"), "workers.count=1")
    yield service
    service.close()


def datum_of(prompt: list[int], completion: list[int], sampled: list[float], advantage: float) -> types.Datum:
    """A policy-gradient datum of one sampled completion (no loss on the prompt)."""
    zeros = [0.0] * (len(prompt) - 1)
    return types.Datum(model_input=types.ModelInput.from_ints(prompt + completion[:-1]),
                       loss_fn_inputs={"target_tokens": prompt[1:] + completion, "logprobs": zeros + sampled,
                                       "advantages": zeros + [advantage] * len(completion)})


def test_the_cookbook_loops_routes_train_on_the_service_and_sample_on_the_fleet(served):
    service = served.client()
    trainer = service.create_lora_training_client(base_model=SHIPPED_MODEL, rank=4).result()
    info = trainer.get_info()
    assert info.is_lora and info.lora_rank == 4 and Path(info.model_data.tokenizer_id).is_dir()  # no network
    tokenizer = trainer.get_tokenizer()
    prompt = tokenizer("12+7=")["input_ids"]
    sampler = trainer.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=3)
    response = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=4, sampling_params=params).result()
    assert len(response.sequences) == 4 and all(s.sequence_id for s in response.sequences)
    # the fleet's behaviour log-probs are the training client's own at that version
    data = [datum_of(prompt, s.tokens, s.logprobs, 0.0) for s in response.sequences]
    forward = trainer.forward(data, "importance_sampling").result()
    for sequence, output in zip(response.sequences, forward.loss_fn_outputs):
        recomputed = output["logprobs"].to_numpy()[len(prompt) - 1:]
        assert np.allclose(recomputed, sequence.logprobs, atol=1e-4)
    again = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=4, sampling_params=params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in response.sequences]  # the seed is honoured
    # a step of the basic RL loop: forward-backward and the optimizer step sent back to back
    rewards = [float(s.tokens[:-1] == tokenizer("19")["input_ids"]) for s in response.sequences]
    advantages = [r - sum(rewards) / len(rewards) + 0.25 * (i - 1.5) for i, r in enumerate(rewards)]
    data = [datum_of(prompt, s.tokens, s.logprobs, a) for s, a in zip(response.sequences, advantages)]
    step = trainer.forward_backward(data, "importance_sampling")
    optim = trainer.optim_step(types.AdamParams(learning_rate=1e-2))
    assert "loss:sum" in step.result().metrics and optim.result().metrics["grad_norm:mean"] > 0
    after = trainer.save_weights_and_get_sampling_client().result()
    moved = after.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    before = sampler.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    assert moved[0] is None and before[0] is None and moved[1:] != before[1:]  # the new sampler has the new weights
    # saves: a training checkpoint and sampler weights, durable tinker:// paths
    saved = trainer.save_state("step-1").result().path
    assert saved.startswith("tinker://") and "/weights/step-1" in saved
    for_sampler = trainer.save_weights_for_sampler("step-1").result().path
    from_path = service.create_sampling_client(model_path=for_sampler).result()
    stops = types.SamplingParams(max_tokens=8, temperature=1.0, seed=3, stop=[tokenizer.eos_token_id])
    served_by_path = from_path.sample(types.ModelInput.from_ints(prompt), 2, stops).result()
    assert all(s.stop_reason in ("stop", "length") for s in served_by_path.sequences)
    resumed = service.create_training_client_from_state_with_optimizer(saved).result()
    rest = service.create_rest_client()
    run = rest.get_training_run(trainer.model_id).result()
    assert run.is_lora and run.last_checkpoint is not None and run.last_checkpoint.tinker_path == saved
    assert rest.get_weights_info_by_tinker_path(saved).result().lora_rank == 4
    assert resumed.get_info().lora_rank == 4
    capabilities = service.get_server_capabilities()
    assert capabilities.supported_models[0].model_name == SHIPPED_MODEL and capabilities.supported_models[0].sampleable
    assert httpx.get(f"{served.url}/api/v1/healthz", timeout=5).json() == {"status": "ok"}
    board = served.dashboard()
    assert sum(w["groups"] for w in board["workers"]) >= 5  # every sampling request above went to the worker process
    view = board["service"]  # the dashboard lists the service's sessions and training clients
    assert any(c["model_id"] == trainer.model_id and c["steps"] == 1 for c in view["training_clients"])
    assert any(trainer.model_id in s["training_clients"] for s in view["sessions"])
    assert view["samples_returned"] >= 5 and view["audited"] >= 1 and view["audits_failed"] == 0


def test_a_retried_optim_step_is_applied_once_and_requests_run_in_seq_id_order(served):
    """Raw requests, as the SDK sends them: an optimizer step sent before the forward-backward it
    follows waits for it; the same optimizer step sent again is the same request."""
    headers = {"X-API-Key": served.key}
    http = httpx.Client(base_url=f"{served.url}/api/v1", headers=headers, timeout=30)

    def result(request_id: str) -> httpx.Response:
        while (answer := http.post("/retrieve_future", json={"request_id": request_id})).status_code == 408:
            pass
        return answer

    session = http.post("/create_session", json={"tags": [], "user_metadata": None, "sdk_version": "0.38.0"}).json()
    created = http.post("/create_model", json={"session_id": session["session_id"], "model_seq_id": 0,
                                               "base_model": SHIPPED_MODEL, "lora_config": {"rank": 2}}).json()
    model_id = result(created["request_id"]).json()["model_id"]
    optim = {"model_id": model_id, "seq_id": 2, "adam_params": {"learning_rate": 0.01}}
    first = http.post("/optim_step", json=optim).json()["request_id"]
    data = [types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]),
                        loss_fn_inputs={"target_tokens": [4, 5, 6], "weights": [1.0, 1.0, 1.0]})]
    body = forward_backward_request_to_proto(types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn="cross_entropy"),
        model_id=model_id, seq_id=1)).SerializeToString()
    backward = http.post("/forward_backward", content=body, headers={"Content-Type": "application/x-protobuf"})
    retried = http.post("/optim_step", json=optim).json()["request_id"]
    assert retried == first
    conflicting = http.post("/optim_step", json={**optim, "adam_params": {"learning_rate": 0.02}})
    assert conflicting.status_code == 409 and "another body" in conflicting.json()["detail"]
    assert result(backward.json()["request_id"]).headers["content-type"] == "application/x-protobuf"
    assert result(first).json()["metrics"]["grad_norm:mean"] > 0  # it ran after the gradients it applies
    save = http.post("/save_weights", json={"model_id": model_id, "path": "once", "seq_id": 3}).json()
    path = result(save["request_id"]).json()["path"]
    run, _, name = path.removeprefix("tinker://").split("/")
    state = json.loads((served.folder / "checkpoints" / "default" / run / "weights" / name / "training_client.json"
                        ).read_text())
    assert state["steps"] == 1
    assert http.post("/retrieve_future", json={"request_id": "req-999999"}).status_code == 410
    assert httpx.post(f"{served.url}/api/v1/create_session", json={}, timeout=5).status_code == 401


def test_half_written_saves_odd_bodies_and_forged_keys_are_refused_plainly(served):
    http = httpx.Client(base_url=f"{served.url}/api/v1", headers={"X-API-Key": served.key}, timeout=30)
    session = http.post("/create_session", json={"tags": [], "user_metadata": None, "sdk_version": "0.38.0"}).json()
    http.post("/create_model", json={"session_id": session["session_id"], "model_seq_id": 0,
                                     "base_model": SHIPPED_MODEL, "lora_config": {"rank": 2}}).raise_for_status()
    model_id = f"{session['session_id']}:train:0"  # the id the SDK derives too
    refusals = [http.post("/save_weights", json={"model_id": model_id, "path": "x.partial", "seq_id": 1}),
                http.post("/load_weights", json={"model_id": model_id, "path": f"tinker://{model_id}/weights/x.partial",
                                                 "seq_id": 2, "optimizer": False}),
                http.post("/load_weights", json={"model_id": model_id, "path": f"tinker://{model_id}/weights/none",
                                                 "seq_id": 3, "optimizer": False}),
                http.post("/weights_info", content=b"[]"), http.post("/weights_info", content=b'{"tinker_path": 5}')]
    for answer in refusals:
        assert answer.status_code == 400, answer.text
        assert str(served.folder) not in answer.text  # no server path in what a client reads
    assert ".partial" in refusals[0].json()["detail"] and "no checkpoint at" in refusals[2].json()["detail"]
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (80 * 1024 * 1024))
    exploded = http.post("/forward_backward", content=bomb,
                         headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})
    assert exploded.status_code == 400 and "decompresses to more than" in exploded.json()["detail"]
    with socket.create_connection(("127.0.0.1", httpx.URL(served.url).port), timeout=10) as raw:
        raw.sendall(b"POST /api/v1/forward_backward HTTP/1.1\r\nHost: x\r\nX-API-Key: forged\r\n"
                    b"Content-Type: application/x-protobuf\r\nContent-Length: 15728640\r\n\r\n")
        assert raw.recv(64).startswith(b"HTTP/1.1 401")  # answered with no body byte sent


def test_the_sdk_sends_an_optim_step_whose_answer_was_lost_again_and_it_is_applied_once(served):
    """The unmodified SDK behind a proxy that loses the service's answer to its optimizer step: the
    SDK sends the step again (its own retry), the service answers with the first one's request id,
    and the adapter takes one step."""
    proxy = LosingProxy(served.url, "/api/v1/optim_step")
    try:
        trainer = tinker.ServiceClient(base_url=proxy.url, api_key=served.key).create_lora_training_client(
            base_model=SHIPPED_MODEL, rank=2).result()
        datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]),
                            loss_fn_inputs={"target_tokens": [4, 5, 6], "weights": [1.0, 1.0, 1.0]})
        trainer.forward_backward([datum], "cross_entropy").result()
        metrics = trainer.optim_step(types.AdamParams(learning_rate=0.01)).result(timeout=120).metrics
        assert metrics["grad_norm:mean"] > 0
        assert (proxy.requests, proxy.lost) == (2, 1)  # sent twice, the first answer lost
        steps = {c["model_id"]: c["steps"] for c in served.dashboard()["service"]["training_clients"]}
        assert steps[trainer.model_id] == 1
    finally:
        proxy.close()


def test_requests_the_service_cannot_serve_are_refused_with_the_reason(served):
    service = served.client()
    trainer = service.create_lora_training_client(base_model=SHIPPED_MODEL, rank=2).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4]),
                        loss_fn_inputs={"target_tokens": [4, 5], "logprobs": [-1.0, -1.0], "advantages": [1.0, 1.0]})
    with pytest.raises(tinker.BadRequestError, match="stable_reinforce.*supported: cross_entropy"):
        trainer.forward_backward([datum], "stable_reinforce").result()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    with pytest.raises(tinker.BadRequestError, match="top_p"):
        sampler.sample(types.ModelInput.from_ints([3, 4]), 1, types.SamplingParams(max_tokens=4, top_p=0.9)).result()
    with pytest.raises(tinker.BadRequestError, match="service.max_tokens"):
        sampler.sample(types.ModelInput.from_ints([3, 4]), 1, types.SamplingParams(max_tokens=10_000)).result()
    with pytest.raises(tinker.BadRequestError, match="not served here"):
        service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=2).result()


def test_values_no_worker_can_take_are_refused_at_the_door_and_the_fleet_keeps_answering(served):
    """A seed past 64 bits had killed each worker that took it in turn; a NaN beta or a huge
    learning rate had made a NaN adapter that failed every worker sampling it."""
    trainer = served.client().create_lora_training_client(base_model=SHIPPED_MODEL, rank=2)
    sampler = trainer.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints([3, 4])
    for params, said in ((types.SamplingParams(max_tokens=4, seed=2**70), "seed"),
                         (types.SamplingParams(max_tokens=4, temperature=0.0), "temperature"),
                         (types.SamplingParams(max_tokens=4, stop=[f"s{i}" for i in range(17)]), "stop_strings"),
                         (types.SamplingParams(max_tokens=0), "max_tokens=0")):
        with pytest.raises(tinker.BadRequestError, match=said):
            sampler.sample(prompt, 1, params).result()
    for adam, said in ((types.AdamParams(beta1=float("nan")), "beta1"),
                       (types.AdamParams(learning_rate=1e30), "service.max_learning_rate")):
        with pytest.raises(tinker.BadRequestError, match=said):
            trainer.optim_step(adam).result()
    answered = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=4, seed=2**63 - 1)).result(timeout=120)
    assert len(answered.sequences) == 2
    assert all(w["state"] != "dead" for w in served.dashboard()["workers"])


class LyingWorker(RolloutWorker):
    """Samples honestly, then reports every sampled token 0.5 nats less likely than it was."""

    def _generate(self, lease):
        request, seconds = super()._generate(lease)
        samples = [r.model_copy(update={"sequences": [s.model_copy(update={"logprobs": [x - 0.5 for x in s.logprobs]})
                                                      for s in r.sequences]}) for r in request.samples]
        return request.model_copy(update={"samples": samples}), seconds


class ChoosingWorker(RolloutWorker):
    """Samples honestly, but returns a try of its own randomness (the lease's seed + 1, + 2, ...):
    the first whose text is not the one the lease's draws pick (on a peaked distribution one try
    may pick the same tokens). Each is a real sample of the sampler with its true log-probs — as a
    worker that steers what clients get by choosing among tries would."""

    def _generate(self, lease):
        drawn, seconds = super()._generate(lease)
        for shift in range(1, 33):
            request, more = super()._generate(lease.model_copy(update={"draw_seed": lease.draw_seed + shift}))
            seconds += more
            if tokens(request) != tokens(drawn):
                return request, seconds
        raise AssertionError("32 tries of other randomness sampled what the draws pick")


def tokens(request) -> list[list[int]]:
    return [sequence.token_ids for result in request.samples for sequence in result.sequences]


def run_worker(worker: RolloutWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_lying_workers_samples_are_caught_and_never_returned(tmp_path):
    served = Served(tmp_path, "workers.count=0")
    liar = LyingWorker(served.url, served.token, name="liar", relay=None, give_up_after_s=30)
    honest = RolloutWorker(served.url, served.token, name="honest", relay=None, give_up_after_s=30)
    try:
        run_worker(liar)
        wait_for(lambda: any(w["name"] == "liar" for w in served.dashboard()["workers"]), timeout_s=60,
                 what="the liar to join")
        trainer = served.client().create_lora_training_client(base_model=SHIPPED_MODEL, rank=2).result()
        sampler = trainer.save_weights_and_get_sampling_client().result()
        prompt = types.ModelInput.from_ints([3, 4, 13, 5, 16])
        pending = sampler.sample(prompt, 3, types.SamplingParams(max_tokens=6, seed=1))
        wait_for(lambda: any(w["name"] == "liar" and w["state"] == "quarantined" for w in served.dashboard()["workers"]),
                 timeout_s=60, what="the liar to be quarantined")
        run_worker(honest)  # the request goes to another worker
        response = pending.result(timeout=120)
        data = [datum_of(prompt.to_ints(), s.tokens, s.logprobs, 0.0) for s in response.sequences]
        forward = trainer.forward(data, "importance_sampling").result()
        for sequence, output in zip(response.sequences, forward.loss_fn_outputs):
            assert np.allclose(output["logprobs"].to_numpy()[4:], sequence.logprobs, atol=1e-4)  # honest numbers
        workers = {w["name"]: w for w in served.dashboard()["workers"]}
        assert workers["liar"]["state"] == "quarantined" and workers["honest"]["groups"] >= 1
    finally:
        liar.stop.set()
        honest.stop.set()
        served.close()


class FragileWorker(RolloutWorker):
    """Its engine fails on any request whose prompt starts with token 7 (as a value no engine can take would)."""

    def _generate(self, lease):
        if any(sample.prompt_ids[0] == 7 for sample in lease.samples):
            raise RuntimeError("the engine cannot sample this")
        return super()._generate(lease)


def test_a_request_that_fails_on_two_workers_is_refused_and_neither_worker_dies(tmp_path):
    served = Served(tmp_path, "workers.count=0")
    workers = [FragileWorker(served.url, served.token, name=f"fragile-{i}", relay=None, give_up_after_s=30)
               for i in range(2)]
    try:
        threads = []
        for count, worker in enumerate(workers, 1):  # one at a time: transformers loads models thread-unsafely
            threads.append(run_worker(worker))
            wait_for(lambda: sum(w["loaded_version"] >= 0 for w in served.dashboard()["workers"]) == count,
                     timeout_s=60, what=f"worker {count} to load its weights")
        sampler = served.client().create_sampling_client(base_model=SHIPPED_MODEL)
        with pytest.raises(Exception, match="failed on two workers.*cannot sample this"):
            sampler.sample(types.ModelInput.from_ints([7, 4, 5]), 1, types.SamplingParams(max_tokens=4)).result(
                timeout=120)
        answered = sampler.sample(types.ModelInput.from_ints([3, 4, 5]), 1, types.SamplingParams(max_tokens=4))
        assert len(answered.result(timeout=120).sequences) == 1
        assert all(thread.is_alive() for thread in threads)
        board = served.dashboard()
        assert board["service"]["samples_refused"] == 1
        assert all(w["last_error"].startswith("lease failed: RuntimeError") for w in board["workers"])
    finally:
        for worker in workers:
            worker.stop.set()
        served.close()


def test_a_worker_returning_samples_it_chose_is_caught_though_its_log_probs_are_true(tmp_path):
    served = Served(tmp_path, "workers.count=0")
    chooser = ChoosingWorker(served.url, served.token, name="chooser", relay=None, give_up_after_s=30)
    honest = RolloutWorker(served.url, served.token, name="honest", relay=None, give_up_after_s=30)
    try:
        run_worker(chooser)
        wait_for(lambda: any(w["name"] == "chooser" for w in served.dashboard()["workers"]), timeout_s=60,
                 what="the chooser to join")
        sampler = served.client().create_sampling_client(base_model=SHIPPED_MODEL)
        prompt = types.ModelInput.from_ints([3, 4, 13, 5, 16])
        pending = sampler.sample(prompt, 4, types.SamplingParams(max_tokens=8))
        wait_for(lambda: any(w["name"] == "chooser" and w["state"] == "quarantined"
                             for w in served.dashboard()["workers"]), timeout_s=60, what="the chooser's quarantine")
        run_worker(honest)  # its log-probs were true: only the draws caught it; the request goes to another worker
        assert len(pending.result(timeout=120).sequences) == 4
        assert served.dashboard()["service"]["audits_failed"] == 1
    finally:
        chooser.stop.set()
        honest.stop.set()
        served.close()


def test_a_client_resumes_from_its_save_after_the_service_restarts(tmp_path):
    served = Served(tmp_path, "workers.count=0")
    service = served.client()
    trainer = service.create_lora_training_client(base_model=SHIPPED_MODEL, rank=2).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 13, 5, 16]),
                        loss_fn_inputs={"target_tokens": [4, 13, 5, 16, 12], "weights": [0.0, 0.0, 0.0, 0.0, 1.0]})
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=0.05))
    path = trainer.save_state("resume-me").result().path
    expected = trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    served.close()
    restarted = Served(tmp_path, "workers.count=0")
    try:
        assert (restarted.url, restarted.key) == (served.url, served.key)  # the same address and key
        resumed = restarted.client().create_training_client_from_state_with_optimizer(path).result()
        again = resumed.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        assert np.allclose(again, expected, atol=1e-6)
        resumed.forward_backward([datum], "cross_entropy")
        assert resumed.optim_step(types.AdamParams(learning_rate=0.05)).result().metrics["grad_norm:mean"] > 0
    finally:
        restarted.close()
