"""``echo2 serve`` on a lab host, its sampling done by ``echo2 worker`` on two other hosts behind
shaped links: a Tinker client's samples come from the remote workers, with the training client's
own log-probs (the sampler's weights reached them through the broadcast, relayed host to host)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from lab_support import open_lab
from waiting import wait_for

from echo2.lab import HostSpec

LINK_MBPS = 20.0
#: The client, a program of its own on the service's host: trains a step, saves for a sampler,
#: samples twice; prints the samples' log-probs beside the training client's for the same tokens.
CLIENT = """
import json, os, sys
import tinker
from tinker import types
service = tinker.ServiceClient()
trainer = service.create_lora_training_client(base_model="echo2/tiny-arith", rank=2).result()
prompt = [3, 4, 13, 5, 16]
datum = types.Datum(model_input=types.ModelInput.from_ints(prompt),
                    loss_fn_inputs={"target_tokens": prompt[1:] + [12], "weights": [0.0, 0.0, 0.0, 0.0, 1.0]})
trainer.forward_backward([datum], "cross_entropy")
trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
sampler = trainer.save_weights_and_get_sampling_client().result()
pairs = []
for seed in (1, 2):
    response = sampler.sample(types.ModelInput.from_ints(prompt), 4, types.SamplingParams(max_tokens=6, seed=seed)).result()
    for s in response.sequences:
        zeros = [0.0] * (len(prompt) - 1)
        d = types.Datum(model_input=types.ModelInput.from_ints(prompt + s.tokens[:-1]),
                        loss_fn_inputs={"target_tokens": prompt[1:] + s.tokens, "logprobs": zeros + s.logprobs,
                                        "advantages": zeros + [0.0] * len(s.tokens)})
        out = trainer.forward([d], "importance_sampling").result().loss_fn_outputs[0]["logprobs"].to_numpy()
        pairs.append([list(s.logprobs), out[len(prompt) - 1:].tolist()])
print(json.dumps(pairs))
"""


def test_a_client_on_the_service_host_samples_from_workers_on_other_hosts(tmp_path):
    hosts = [HostSpec(name, LINK_MBPS, LINK_MBPS) for name in ("service", "w1", "w2")]
    lab = open_lab(hosts)
    folder = tmp_path / "service"
    with lab:
        command = [sys.executable, "-m", "echo2.cli", "serve", f"service.dir={folder}", "workers.count=0",
                   f"coordinator.host={lab.own_address('service')}", "service.max_tokens=8"]
        with (tmp_path / "service.log").open("w") as log:
            service = lab.popen("service", command, stdout=log, stderr=subprocess.STDOUT)
        workers = []
        try:
            wait_for(lambda: (folder / "coordinator.json").exists(), 120, "the service to start")
            url = json.loads((folder / "coordinator.json").read_text())["url"]
            for host in ("w1", "w2"):
                with (tmp_path / f"{host}.log").open("w") as log:
                    workers.append(lab.popen(host, [
                        sys.executable, "-m", "echo2.cli", "worker", "--coordinator", url, "--token-file",
                        str(folder / "token"), "--name", host, "--threads", "1", "--upload-mbps", str(LINK_MBPS),
                        "--relay-host", "0.0.0.0", "--advertise-host", lab.own_address(host)],
                        stdout=log, stderr=subprocess.STDOUT))
            wait_for(lambda: (tmp_path / "service.log").read_text().count("joined as") >= 2, 120, "both workers")
            environment = {"TINKER_BASE_URL": url, "TINKER_API_KEY": (folder / "api_key").read_text().strip(),
                           "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
            started = time.time()
            client = lab.run("service", [sys.executable, "-c", CLIENT], timeout=300, capture_output=True, text=True,
                             env=environment)
            assert client.returncode == 0, client.stderr[-3000:]
            pairs = json.loads(client.stdout.strip().splitlines()[-1])
            print(f"8 samples served from the lab hosts in {time.time() - started:.1f}s")
        finally:
            for process in (*workers, service):
                process.terminate()
                process.wait(timeout=30)
    assert len(pairs) == 8
    for sampled, trained in pairs:
        assert max(abs(a - b) for a, b in zip(sampled, trained)) < 1e-4  # the fleet's numbers are the trainer's
    logs = {host: (tmp_path / f"{host}.log").read_text() for host in ("w1", "w2")}
    fetched = [host for host, text in logs.items() if re.search(r"v[1-9][0-9]*: [0-9]+ chunks", text)]
    assert fetched, logs  # the sampler's version reached the lab hosts through the broadcast (the service
    # runs no worker of its own: every sample above came from w1 or w2)
