"""The wire, hardened (issue 18): credentials checked before a body is read, bodies capped while
they stream, TLS with pinned or CA-checked certificates, relay URLs checked, a broadcast
credential that is worth nothing but chunks, and no credential in files others can read."""

import json

import pytest
from broadcast_support import random_payload
from tls_support import self_signed

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.errors import BroadcastError
from echo2.broadcast.relay import RelayServer
from echo2.config import load_config
from echo2.net.guard import broadcast_credential
from echo2.net.redact import REDACTED
from echo2.net.tls import certificate_fingerprint
from echo2.rollout.options import WorkerOptions


def test_tls_relay_serves_only_pinned_peers(tmp_path):
    cert, key = self_signed(tmp_path)
    credential = broadcast_credential("run-secret")
    source, store = ChunkStore(), ChunkStore()
    manifest = source.publish(3, random_payload(4096, 3), chunk_size=1024)
    with RelayServer(source, token=credential, certfile=cert, keyfile=key) as relay:
        assert relay.url.startswith("https://")
        options = WorkerOptions(coordinator="https://127.0.0.1:1", token="run-secret",
                                pin_sha256=[certificate_fingerprint(cert)])
        result = fetch_version(3, [relay.url], store, token=credential, verify=options.tls_verify(), timeout_s=10)
        assert result.manifest.sha256 == manifest.sha256
        wrong = WorkerOptions(coordinator="https://127.0.0.1:1", token="run-secret", pin_sha256=["cd" * 32])
        with pytest.raises(BroadcastError, match="pin mismatch"):
            fetch_version(3, [relay.url], ChunkStore(), token=credential, verify=wrong.tls_verify(), timeout_s=2,
                          stall_s=1, poll_s=0.2)
    source.close()
    store.close()


def test_a_tls_run_end_to_end_keeps_its_token_private(tmp_path):
    """A real run (learner + two local worker processes) over TLS with an explicit token: local
    workers pin the coordinator's certificate and relay to each other over https; no file
    others can read holds the token, and ``--resume`` still finds it."""
    from echo2.launch.train import _endpoint, run_training
    from echo2.report.html import write_report

    cert, key = self_signed(tmp_path)
    secret = "c0ffee0123456789abcdef42f00dfeed"
    config = load_config(overrides=[
        # 8 versions: a 4-step run on a loaded machine could end before either relay had served a peer
        "run.steps=8", "eval.size=10", "eval.every=4", "learner.groups_per_step=8", "rollout.groups_per_lease=4",
        "telemetry.tensorboard=false", "telemetry.progress=false", "coordinator.data_timeout_s=120",
        "checkpoint.every=0", f"run.dir={tmp_path}", "run.name=run", f"coordinator.token={secret}",
        f"coordinator.tls_certfile={cert}", f"coordinator.tls_keyfile={key}", "broadcast.chunk_mib=0.05"])
    summary = run_training(config)
    run_dir = summary.run_dir
    assert summary.workers_registered == 2
    endpoint = json.loads((run_dir / "coordinator.json").read_text())
    assert endpoint["url"].startswith("https://") and endpoint["token"] == secret
    for private in ("coordinator.json", "token"):
        assert (run_dir / private).stat().st_mode & 0o077 == 0
    write_report(run_dir, None)
    logs = "".join(p.read_text() for p in (run_dir / "workers").glob("*.log"))
    relayed = [line for line in logs.splitlines() if " chunks in " in line and "from https://" in line]
    assert any(endpoint["url"] not in line for line in relayed)  # a peer's relay, over TLS
    for path in [run_dir / "config.yaml", run_dir / "train.log", run_dir / "report.html",
                 *(run_dir / "workers").glob("*.log")]:
        assert secret not in path.read_text(errors="replace"), path
    assert "certificate pin mismatch" not in logs
    resumed = load_config(str(run_dir / "config.yaml"))
    assert resumed.coordinator.token == REDACTED
    assert _endpoint(resumed, run_dir, resuming=True) == (endpoint["port"], secret)
