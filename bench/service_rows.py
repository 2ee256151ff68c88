"""The training service under attack (``bench/attacks.py --service``): one ``echo2 serve`` of the
shipped model with two local workers, started here as its own process, an honest ``tinker`` SDK
client sampling and training beside every attack, and each attack a row:

S1. ``fleet_values``: the values that had killed every worker or published a NaN adapter (a seed of
    2**70, temperature 0, 17 stop strings, ``max_tokens=0``, ``beta1=NaN``, ``lr=1e30``), then a
    datum whose advantages (1e30) overflow the gradient. Expected: each refused (400) or the step not
    applied, no worker process exited, the honest client's every request answered;
S2. ``memory``: 150 rank-64 training clients over 19 keys against a budget set 0.5 GB above the
    service's memory at the start. Expected: refused at the budget naming it, the service's
    resident memory never above it;
S3. ``tenant``: a second key names the first's session, training client, sampling session, save
    and futures in every route that takes one. Expected: each answered as unknown, the first's
    adapter scoring its datum as before;
S4. ``forged_key``: a 15 MB body behind a forged key (raw socket). Expected: 401 before the body;
S5. ``zstd_bomb``: a 14 KB zstd body that inflates to 3 GiB. Expected: 400, the service's memory
    up by less than 100 MB;
S6. ``partial_race``: 100 loads of ``name.partial`` while ``name`` is saved again and again.
    Expected: every one a 400, no server error;
S7-S9. ``chooser``, ``repeater``, ``cherry_picker`` behind ``asample``: a worker process whose
    samples are real and whose log-probs are true but chosen (its own randomness, one completion
    for all, the shortest of two tries). The honest client's requests are seeded, so the bench
    replays their draws itself: ``chosen_returned_after`` counts returned sequences that are not
    the draws' after the worker's quarantine. Expected: quarantined, 0 after;
S10. ``neighbours`` (full only): not an attack, what one tenant's use costs another's: one client's
    training step timed alone, then beside 20 clients (on three other keys) saving their samplers
    and sampling them without a pause. Publishes and audits run on the fleet's lane, training on
    the work thread: ``step_vs_alone`` is what the neighbours cost (``detected``: every neighbour
    kept going).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from common import wait_until

ROOT = Path(__file__).resolve().parent.parent
SERVICE_ROWS = {"fleet_values": "S1 fleet-killing values, NaN adapter", "memory": "S2 150-client memory climb",
                "tenant": "S3 second tenant on the first's ids", "forged_key": "S4 15 MB body, forged key",
                "zstd_bomb": "S5 zstd bomb (3 GiB)", "partial_race": "S6 .partial race",
                "chooser": "S7 asample: own randomness", "repeater": "S8 asample: one answer for all",
                "cherry_picker": "S9 asample: shortest of 2 tries", "neighbours": "S10 training beside 20 publishing"}


class Service:
    """``echo2 serve`` as its own process, on ``folder``."""

    def __init__(self, folder: Path, *overrides: str) -> None:
        self.folder = folder
        shutil.rmtree(folder, ignore_errors=True)  # an earlier invocation's service: its address and keys are stale
        folder.mkdir(parents=True)
        self.log = (folder / "serve.out").open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "echo2.cli", "serve", f"service.dir={folder}",
                                         "service.max_tokens=16", *overrides], stdout=self.log, stderr=subprocess.STDOUT,
                                        cwd=ROOT, env={**os.environ, "TINKER_TELEMETRY": "0"})
        deadline = time.monotonic() + 120
        while not (folder / "coordinator.json").exists() or not (folder / "api_key").exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"echo2 serve did not start: see {folder / 'serve.out'}")
            time.sleep(0.2)
        self.url = json.loads((folder / "coordinator.json").read_text())["url"]
        self.key, self.token = (folder / "api_key").read_text().strip(), (folder / "token").read_text().strip()
        wait_until(lambda: len(self.workers()) >= 2, 120, "the local workers")

    def rss(self) -> int:
        return psutil.Process(self.process.pid).memory_info().rss

    def worker_pids(self) -> list[int]:
        return sorted(c.pid for c in psutil.Process(self.process.pid).children(recursive=True)
                      if "worker" in " ".join(c.cmdline()))

    def dashboard(self) -> dict:
        return httpx.get(f"{self.url}/v1/dashboard", headers={"X-Echo2-Token": self.token}, timeout=10).json()

    def workers(self) -> dict[str, dict]:
        return {w["name"]: w for w in self.dashboard()["workers"] if w["loaded_version"] >= 0}

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


class HonestClient:
    """The ``tinker`` SDK's sampling client of the base model, seeded requests only, on a thread:
    how many it asked, how many were answered, and every sequence returned (with its seed)."""

    def __init__(self, service: Service) -> None:
        import tinker
        from tinker import types

        self.types = types
        self.sampler = tinker.ServiceClient(base_url=service.url, api_key=service.key).create_sampling_client(
            base_model="echo2/tiny-arith")
        self.asked = self.answered = self.failed = 0
        self.returned: list[tuple[float, int, int, list[int]]] = []
        """(when, seed, index, tokens) of every sequence returned."""
        self._stop = threading.Event()
        self._seed = 1000
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        prompt = self.types.ModelInput.from_ints([3, 4, 13, 5, 16])
        while not self._stop.is_set():
            self._seed += 1
            self.asked += 1
            try:
                response = self.sampler.sample(prompt, 2, self.types.SamplingParams(max_tokens=8, seed=self._seed)
                                               ).result(timeout=120)
            except Exception:  # noqa: BLE001 -- counted: the row says the client was not answered
                self.failed += 1
                continue
            self.answered += 1
            now = time.time()
            self.returned += [(now, self._seed, i, list(s.tokens)) for i, s in enumerate(response.sequences)]
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=150)


def not_drawn(returned: list[tuple[float, int, int, list[int]]], tolerance: float = 0.01) -> list[float]:
    """When each returned sequence was returned that is not the one its seeded draws pick under the
    base model (replayed here: :mod:`echo2.model.draws`)."""
    import torch

    from echo2.core.draw_rule import uniform
    from echo2.learner.logprobs import completion_scores
    from echo2.model.draws import draw_gaps
    from echo2.model.loading import load_model

    model = load_model("echo2/tiny-arith")
    chosen = []
    for when, seed, index, tokens in returned:
        scores = completion_scores(model, [[3, 4, 13, 5, 16]], [tokens], pad_id=0, intervals=True)
        u = torch.tensor([[uniform(seed, index, p) for p in range(len(tokens))]], dtype=torch.float64)
        if float(draw_gaps(*scores.intervals, u).max()) > tolerance:
            chosen.append(when)
    return chosen


def fleet_values_row(service: Service, honest: HonestClient) -> dict[str, Any]:
    from tinker import types
    from tinker.proto.request_conv import forward_backward_request_to_proto

    pids = service.worker_pids()
    raw = RawClientOf(service)
    session = raw.session()
    raw.result(raw.training_client(session, 0, 2, "echo2/tiny-arith").json()["request_id"])
    model_id = f"{session}:train:0"
    sampling = raw.post("/create_sampling_session", json={"session_id": session, "sampling_session_seq_id": 0,
                                                          "base_model": "echo2/tiny-arith"}).json()["sampling_session_id"]
    prompt = types.ModelInput.from_ints([3, 4]).model_dump(mode="json")
    statuses = []
    for params in ({"max_tokens": 4, "seed": 2**70}, {"max_tokens": 4, "temperature": 0.0},
                   {"max_tokens": 4, "stop": [f"s{i}" for i in range(17)]}, {"max_tokens": 0}):
        statuses.append(raw.post("/asample", json={"sampling_session_id": sampling, "num_samples": 1, "prompt": prompt,
                                                   "sampling_params": params}).status_code)
    for seq, adam in ((1, {"beta1": float("nan")}), (2, {"learning_rate": 1e30})):
        body = json.dumps({"model_id": model_id, "seq_id": seq, "adam_params": adam})  # NaN as JSON's NaN
        statuses.append(raw.post("/optim_step", content=body, headers={"content-type": "application/json"}).status_code)
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]),
                        loss_fn_inputs={"target_tokens": [4, 5, 6], "logprobs": [-1.0] * 3, "advantages": [1e30] * 3})
    body = forward_backward_request_to_proto(types.ForwardBackwardRequest(forward_backward_input=types.ForwardBackwardInput(
        data=[datum], loss_fn="importance_sampling"), model_id=model_id, seq_id=3)).SerializeToString()
    raw.result(raw.post("/forward_backward", content=body, headers={"Content-Type": "application/x-protobuf"}
                        ).json()["request_id"])
    step = raw.result(raw.post("/optim_step", json={"model_id": model_id, "seq_id": 4, "adam_params": {}}
                               ).json()["request_id"]).json()
    saved = raw.result(raw.post("/save_weights_for_sampler", json={"model_id": model_id, "seq_id": 5}
                                ).json()["request_id"])
    time.sleep(3)
    refused = sum(s == 400 for s in statuses)
    exited = len(set(pids) - set(service.worker_pids()))
    return {"detected": "yes" if refused == len(statuses) and step["metrics"].get("update_refused:sum") == 1
            and exited == 0 else "no", "refused": f"{refused}/{len(statuses)}", "workers_exited": exited,
            "how": f"values refused {statuses}; overflowing step not applied ({step['metrics']}); sampler "
                   f"published after it: {saved.status_code}"}


def RawClientOf(service: Service, key: str | None = None):  # noqa: N802 -- a constructor
    from attackers.service import RawClient

    return RawClient(service.url, key or service.key)


def memory_row(service: Service, budget_gb: float) -> dict[str, Any]:
    """Each client trained one step (its gradients and AdamW moments allocated, as a client's
    first step allocates them), as the issue's climb measured it."""
    from tinker import types
    from tinker.proto.request_conv import forward_backward_request_to_proto

    from echo2.service.keys import ApiKeys

    keys = ApiKeys(service.folder)
    created = refused = 0
    peak, said = service.rss(), ""
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5, 6]),
                        loss_fn_inputs={"target_tokens": [4, 5, 6, 7], "weights": [1.0] * 4})
    for index in range(150):
        if index % 8 == 0:
            raw = RawClientOf(service, keys.issue(f"climber-{index // 8}"))
            session = raw.session()
        answer = raw.training_client(session, index % 8, 64, "echo2/tiny-arith")
        if answer.status_code == 200:
            outcome = raw.result(answer.json()["request_id"]).json()
            if "error" in outcome:
                refused += 1
                said = outcome["error"]
            else:
                created += 1
                model_id = f"{session}:train:{index % 8}"
                body = forward_backward_request_to_proto(types.ForwardBackwardRequest(
                    forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy"),
                    model_id=model_id, seq_id=1)).SerializeToString()
                raw.result(raw.post("/forward_backward", content=body,
                                    headers={"Content-Type": "application/x-protobuf"}).json()["request_id"])
                raw.result(raw.post("/optim_step", json={"model_id": model_id, "seq_id": 2,
                                                         "adam_params": {"learning_rate": 1e-4}}).json()["request_id"])
        else:
            refused += 1
            said = answer.json().get("detail", "")
        peak = max(peak, service.rss())
    budget = budget_gb * 2**30
    return {"detected": "yes" if refused and peak < budget else "no", "clients_created": created,
            "clients_refused": refused, "rss_peak_gb": peak / 2**30, "budget_gb": budget_gb,
            "how": f"{created} created, {refused} refused ('{said[:90]}'), peak {peak / 2**30:.2f} GB < "
                   f"budget {budget_gb:.2f} GB"}


def tenant_row(service: Service) -> dict[str, Any]:
    import tinker
    from tinker import types

    from echo2.service.keys import ApiKeys

    alice = tinker.ServiceClient(base_url=service.url, api_key=service.key)
    trainer = alice.create_lora_training_client(base_model="echo2/tiny-arith", rank=2).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]),
                        loss_fn_inputs={"target_tokens": [4, 5, 6], "weights": [1.0] * 3})
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    save = trainer.save_state("mine").result().path
    sampler = trainer.save_weights_and_get_sampling_client().result()
    scored = lambda: trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy().tolist()  # noqa: E731
    before = scored()
    model_id = trainer.model_id
    bob = RawClientOf(service, ApiKeys(service.folder).issue("bob"))
    bob_session = bob.session()
    answers = [bob.post("/get_info", json={"model_id": model_id}),
               bob.post("/optim_step", json={"model_id": model_id, "seq_id": 90, "adam_params": {"learning_rate": 1.0}}),
               bob.post("/save_weights", json={"model_id": model_id, "seq_id": 91, "path": "mine", "overwrite": True}),
               bob.post("/unload_model", json={"model_id": model_id}),
               bob.post("/load_weights", json={"session_id": bob_session, "model_seq_id": 0, "path": save,
                                               "optimizer": True, "base_model": "echo2/tiny-arith"}),
               bob.post("/weights_info", json={"tinker_path": save}),
               bob.post("/asample", json={"sampling_session_id": sampler._sampling_session_id, "num_samples": 1,
                                          "prompt": types.ModelInput.from_ints([3]).model_dump(mode="json"),
                                          "sampling_params": {"max_tokens": 2}}),
               bob.http.get(f"/samplers/{sampler._sampling_session_id}"), bob.http.get(f"/training_runs/{model_id}"),
               bob.post("/session_heartbeat", json={"session_id": alice.holder.get_session_id()}),
               *[bob.post("/retrieve_future", json={"request_id": f"req-{n}"}) for n in range(1, 6)]]
    statuses = [a.status_code for a in answers]
    unchanged = scored() == before
    return {"detected": "yes" if all(s in (400, 404, 410) for s in statuses) and unchanged else "no",
            "how": f"{len(statuses)} requests on the first tenant's ids: {sorted(set(statuses))}; its adapter "
                   f"{'unchanged' if unchanged else 'CHANGED'}"}


#: Row S10's neighbours: training clients on keys of their own, each saving its sampler and sampling
#: it again and again (a publish and an audit each time), beside the one whose steps are timed.
NEIGHBOURS, NEIGHBOURS_PER_KEY, TIMED_STEPS = 20, 7, 8


def neighbours_row(service: Service) -> dict[str, Any]:
    """What other tenants' publishes and audits cost one client's training: the median seconds of
    its step (forward_backward then optim_step, each waited for) alone, then while
    :data:`NEIGHBOURS` clients save and sample their samplers without a pause. Publishes and audits
    run on the fleet's lane, training on the work thread; both in one process, on these two cores."""
    import statistics

    import tinker
    from tinker import types

    from echo2.service.keys import ApiKeys

    trainer = tinker.ServiceClient(base_url=service.url, api_key=service.key).create_lora_training_client(
        base_model="echo2/tiny-arith", rank=8).result()
    datum = types.Datum(model_input=types.ModelInput.from_ints([3, 4, 13, 5, 16, 7, 8, 9]),
                        loss_fn_inputs={"target_tokens": [4, 13, 5, 16, 7, 8, 9, 12], "weights": [1.0] * 8})

    def step_s(count: int) -> float:
        seconds = []
        for _ in range(count):
            started = time.perf_counter()
            trainer.forward_backward([datum], "cross_entropy").result(timeout=120)
            trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result(timeout=120)
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds)

    step_s(2)  # its first steps allocate the optimizer's state
    alone = step_s(TIMED_STEPS)
    keys = ApiKeys(service.folder)
    services = [tinker.ServiceClient(base_url=service.url, api_key=keys.issue(f"neighbours-{i // NEIGHBOURS_PER_KEY}"))
                for i in range(NEIGHBOURS)]
    stop, published, failed = threading.Event(), [0], [0]
    prompt = types.ModelInput.from_ints([3, 4, 13, 5, 16])

    def publish(client: Any) -> None:
        try:
            neighbour = client.create_lora_training_client(base_model="echo2/tiny-arith", rank=8).result(timeout=120)
            while not stop.is_set():
                sampler = neighbour.save_weights_and_get_sampling_client().result(timeout=120)
                sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8)).result(timeout=120)
                published[0] += 1
        except Exception:  # noqa: BLE001 -- counted: the row says how many neighbours fell over
            failed[0] += 1

    threads = [threading.Thread(target=publish, args=(client,), daemon=True) for client in services]
    for thread in threads:
        thread.start()
    wait_until(lambda: published[0] >= NEIGHBOURS, 300, "every neighbour's first publish")
    before = published[0]
    beside = step_s(TIMED_STEPS)
    during = published[0] - before
    stop.set()
    for thread in threads:
        thread.join(timeout=150)
    return {"detected": "yes" if not failed[0] else "no", "step_s_alone": alone, "step_s_beside": beside,
            "step_vs_alone": beside / alone, "publishes_during": during,
            "how": f"one client's step {alone:.2f}s alone, {beside:.2f}s beside {NEIGHBOURS} clients saving and "
                   f"sampling ({during} publishes and audits meanwhile, {failed[0]} neighbours failed): "
                   f"{beside / alone:.2f}x"}


def forged_key_row(service: Service) -> dict[str, Any]:
    from attackers.service import forged_key_body

    sent = forged_key_body(service.url, "/api/v1/create_session", 15 * 2**20)
    return {"detected": "yes" if sent["status"] == 401 and sent["body_bytes_sent"] < 15 * 2**20 else "no",
            "how": f"{sent['status']} after {sent['body_bytes_sent']} of 15 MiB sent, {sent['seconds'] * 1000:.0f} ms"}


def zstd_bomb_row(service: Service) -> dict[str, Any]:
    import zstandard

    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (3 * 2**30))
    before = service.rss()
    answer = RawClientOf(service).post("/forward_backward", content=bomb, headers={
        "Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})
    grew = (service.rss() - before) / 2**20
    return {"detected": "yes" if answer.status_code == 400 and grew < 100 else "no",
            "how": f"{len(bomb) / 1024:.0f} KB body: {answer.status_code} "
                   f"'{answer.json().get('detail', '')[:60]}', service memory +{grew:.0f} MB"}


def partial_race_row(service: Service) -> dict[str, Any]:
    raw = RawClientOf(service)
    session = raw.session()
    raw.result(raw.training_client(session, 0, 2, "echo2/tiny-arith").json()["request_id"])
    model_id = f"{session}:train:0"
    stop, statuses = threading.Event(), []

    def saving() -> None:
        seq = 1
        while not stop.is_set():
            raw.result(raw.post("/save_weights", json={"model_id": model_id, "seq_id": seq, "path": "x",
                                                       "overwrite": True}).json()["request_id"])
            seq += 1

    saver = threading.Thread(target=saving, daemon=True)
    saver.start()
    poller = RawClientOf(service)
    for _ in range(100):
        statuses.append(poller.post("/weights_info", json={"tinker_path": f"tinker://{model_id}/weights/x.partial"}
                                    ).status_code)
    stop.set()
    saver.join(timeout=60)
    errors = sum(s >= 500 for s in statuses)
    return {"detected": "yes" if errors == 0 and all(s == 400 for s in statuses) else "no",
            "how": f"100 polls of x.partial during saves of x: {statuses.count(400)} refused (400), {errors} server errors"}


def chooser_row(service: Service, kind: str, honest: HonestClient) -> dict[str, Any]:
    """A choosing worker joins (the honest local workers parked meanwhile are not needed: the
    requests go to whoever leases first), until quarantined; what the honest client got after."""
    log = (service.folder / f"{kind}.log").open("w")
    attacker = subprocess.Popen([sys.executable, str(Path(__file__).parent / "attacks.py"), "--service-worker", kind,
                                 "--coordinator", service.url, "--name", f"attacker-{kind}"],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ECHO2_TOKEN": service.token})
    joined = time.time()
    try:
        wait_until(lambda: service.dashboard()["workers"] and any(
            w["name"] == f"attacker-{kind}" and w["state"] == "quarantined" for w in service.dashboard()["workers"]),
            240, f"the {kind}'s quarantine")
        caught = time.time()
        time.sleep(8)  # the honest client keeps sampling: none of the attacker's choices may reach it now
    finally:
        attacker.terminate()
        attacker.wait(30)
        log.close()
    returned = [r for r in honest.returned if r[0] >= joined]
    chosen = not_drawn(returned)
    after = sum(t >= caught for t in chosen)
    return {"detected": "yes" if after == 0 else "no", "seconds_to_quarantine": caught - joined,
            "chosen_returned_before": sum(t < caught for t in chosen), "chosen_returned_after": after,
            "how": f"quarantined {caught - joined:.1f}s after joining; of {len(returned)} sequences returned since, "
                   f"{len(chosen)} not the draws' ({after} after the catch)"}


def service_rows(out: Path, quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    probe = Service(out / "probe", "workers.count=2")
    start_gb = probe.rss() / 2**30
    probe.close()
    budget = math.ceil((start_gb + 0.5) * 10) / 10
    service = Service(out / "service", "workers.count=2", f"service.memory_budget_gb={budget}",
                      "service.max_clients=400")
    rows: list[dict[str, Any]] = []
    honest = HonestClient(service)
    try:
        plays = [("fleet_values", lambda: fleet_values_row(service, honest)), ("tenant", lambda: tenant_row(service)),
                 *([] if quick else [("neighbours", lambda: neighbours_row(service))]),
                 ("forged_key", lambda: forged_key_row(service)), ("zstd_bomb", lambda: zstd_bomb_row(service)),
                 ("partial_race", lambda: partial_race_row(service)),
                 *[(kind, lambda kind=kind: chooser_row(service, kind, honest))
                   for kind in (("chooser",) if quick else ("chooser", "repeater", "cherry_picker"))],
                 ("memory", lambda: memory_row(service, budget))]
        for kind, play in plays:
            started = time.time()
            row = play()
            rows.append({"attack": SERVICE_ROWS[kind], "kind": kind, "run": "service", **row,
                         "seconds": time.time() - started})
            print(f"== {SERVICE_ROWS[kind]}: {row['detected']} ({row['how']})", flush=True)
    finally:
        honest.stop()
        exited = len(service.worker_pids())
        service.close()
    meta = {"service_start_rss_gb": start_gb, "budget_gb": budget, "honest_asked": honest.asked,
            "honest_answered": honest.answered, "honest_failed": honest.failed, "workers_alive_at_end": exited}
    return rows, meta
