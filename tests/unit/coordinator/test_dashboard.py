"""The live dashboard: its data route opens to the viewer credential and the run token only, shows
the coordinator's books and the learner's files without a credential in them, and its page,
served open and self-contained, follows a real run in headless Chromium (over TLS too)."""

import json
import logging
import re
import ssl
import sys

import httpx
import pytest
from dashboard_screenshot import dashboard_data  # noqa: E402
from dashboard_support import (
    RUN_TOKEN,
    VIEWER,
    tls_coordinator,  # noqa: F401 (fixtures)
)
from fastapi.testclient import TestClient
from report_support import real_run_dir
from state_support import make_state, publish

from echo2.coordinator.app import create_app
from echo2.coordinator.records import Rejected
from echo2.launch.train import DASHBOARD_FILE, announce_dashboard, attach_log_file
from echo2.net.guard import broadcast_credential, viewer_credential
from echo2.net.redact import redact_logs, remove_redaction
from echo2.protocol import AUTH_HEADER, Completion, GroupResult, SubmitRequest


def as_viewer(credential: str | None = VIEWER) -> dict[str, str]:
    return {AUTH_HEADER: credential} if credential is not None else {}


# ---------------------------------------------------------------------- credentials
def test_the_viewer_token_and_the_run_token_read_the_dashboard_and_nothing_else():
    state = make_state(staleness=1)
    worker = state.members.register("w", price_per_hour=0.5)
    client = TestClient(create_app(state, lease_wait_s=0))
    assert VIEWER not in (RUN_TOKEN, broadcast_credential(RUN_TOKEN))
    for credential in (VIEWER, RUN_TOKEN):
        assert client.get("/v1/dashboard", headers=as_viewer(credential)).status_code == 200
    for credential in (None, "wrong", VIEWER[:-1], worker.session_token, broadcast_credential(RUN_TOKEN)):
        refused = client.get("/v1/dashboard", headers=as_viewer(credential))
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized", credential
    # the viewer credential is worth nothing anywhere else
    for method, path in (("post", "/v1/register"), ("post", "/v1/heartbeat"), ("post", "/v1/lease"),
                         ("post", "/v1/submit"), ("post", "/v1/deregister"), ("get", "/v1/version"),
                         ("get", "/v1/broadcast/0/manifest")):
        assert getattr(client, method)(path, headers=as_viewer()).status_code == 401, path
    text = client.get("/v1/dashboard", headers=as_viewer()).text
    for secret in (RUN_TOKEN * 2, worker.session_token, worker.session_token.partition(".")[2],
                   broadcast_credential(RUN_TOKEN), VIEWER):
        assert secret not in text


def test_workers_are_shown_with_their_state_version_price_and_last_error():
    state = make_state(staleness=1)
    names = ["fresh", "behind", "parked", "quarantined", "gone", "refused"]
    workers = {name: state.members.register(name, price_per_hour=0.25 * i) for i, name in enumerate(names)}
    for version in (1, 2, 3):
        publish(state, version)
    for name, record in workers.items():
        state.members.heartbeat(record, 1 if name == "behind" else 3, [])
    state.quarantine(workers["quarantined"].worker_id, "audit failed")
    state.members.deregister(workers["gone"])
    with pytest.raises(Rejected):
        completions = [Completion(token_ids=[3, 1], logprobs=[-0.1, -0.1])] * 2
        state.work.submit(workers["refused"], SubmitRequest(lease_id="no-such-lease", version=3, generate_seconds=0.1,
                                                       groups=[GroupResult(slot=0, completions=completions)]))
    with state.cond:  # as cost-aware activation parks a worker
        workers["parked"].active = False
    data = TestClient(create_app(state, lease_wait_s=0)).get("/v1/dashboard", headers=as_viewer()).json()
    rows = {row["name"]: row for row in data["workers"]}
    assert {name: rows[name]["state"] for name in names} == {
        "fresh": "active", "behind": "stale", "parked": "parked", "quarantined": "quarantined", "gone": "left",
        "refused": "active"}
    assert rows["behind"]["version"] == 1 and rows["fresh"]["version"] == 3 and data["version"] == 3
    assert rows["parked"]["price_per_hour"] == 0.5
    assert rows["refused"]["last_error"].startswith("unknown_lease: ") and rows["refused"]["rejected"] == 1
    assert [v["version"] for v in data["versions"]] == [1, 2, 3]  # the newest S + 2 the coordinator tracks
    assert all(v["live"] == 5 and v["spread_s"] is None for v in data["versions"])  # quarantined is still live
    assert data["costs"]["workers_usd"] > 0 and data["costs"]["worker_hours"] > 0


def test_the_learner_side_comes_from_the_run_directory_as_it_grows(tmp_path):
    run_dir = real_run_dir(tmp_path / "run", steps=12)
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0, run_dir=run_dir))
    data = client.get("/v1/dashboard", headers=as_viewer()).json()
    assert data["run"] == "run" and len(data["reward"]) == 12 and data["reward"][-1] == [12, pytest.approx(0.32)]
    assert [step for step, _ in data["accuracy"]] == [0, 4, 8, 12]
    assert data["staleness"] == [[0, 120], [1, 648]]
    assert data["utilization"] == pytest.approx(0.7) and len(data["utilization_bins"]) == 60
    spread = {v["version"]: v["spread_s"] for v in data["versions"]}
    assert spread[12] == pytest.approx(0.2) and data["costs"]["learner_usd"] == pytest.approx(0.024)
    # the learner appends a step, the second half of a line still unwritten: read once it is whole
    record = json.dumps({"step": 13, "time": 1_800_000_013.0, "version": 13, "reward_mean": 0.9,
                         "learner_busy_s": 9.1, "learner_idle_s": 3.9, "utilization": 0.7})
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write(record[:20])
        metrics.flush()
        assert len(client.get("/v1/dashboard", headers=as_viewer()).json()["reward"]) == 12
        metrics.write(record[20:] + "\n")
    assert client.get("/v1/dashboard", headers=as_viewer()).json()["reward"][-1] == [13, 0.9]


# ---------------------------------------------------------------------- the page
def test_the_page_is_open_self_contained_and_asks_relative_urls_only():
    client = TestClient(create_app(make_state(staleness=1), lease_wait_s=0))
    reply = client.get("/dashboard")  # no credential: the page holds no data
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in reply.headers["content-security-policy"]
    page = reply.text
    assert "://" not in page  # no absolute URL of any scheme
    assert not re.search(r"\b(src|href)\s*=|url\(|@import|<link\b|<iframe\b", page)  # no asset of any origin
    assert re.findall(r"fetch\(([^,)]+)", page) == ['"v1/dashboard"']  # resolved against the page: http or https
    assert f'"{AUTH_HEADER}"' in page and "location.hash" in page and VIEWER not in page
    assert "/dashboard" not in client.get("/openapi.json").json()["paths"]  # the open page is no API route


def test_the_link_goes_to_an_owner_only_file_and_the_terminal_never_to_train_log(tmp_path, monkeypatch, capsys):
    secret = "c0ffee0123456789abcdef42f00dfeed"
    log_file = attach_log_file(tmp_path)  # as run_training does
    redaction = redact_logs(secret, viewer_credential(secret))
    try:
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        announce_dashboard(tmp_path, "https://127.0.0.1:8443", secret)
        logging.getLogger("echo2").warning("a careless line with %s", viewer_credential(secret))
    finally:
        remove_redaction(redaction)
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    link = f"https://127.0.0.1:8443/dashboard#token={viewer_credential(secret)}"
    assert (tmp_path / DASHBOARD_FILE).read_text() == link + "\n"
    assert (tmp_path / DASHBOARD_FILE).stat().st_mode & 0o077 == 0
    assert link in capsys.readouterr().err
    logged = (tmp_path / "train.log").read_text()
    assert str(tmp_path / DASHBOARD_FILE) in logged and viewer_credential(secret) not in logged


def test_the_dashboard_is_served_over_tls(tls_coordinator):
    server, cert = tls_coordinator
    link = f"{server.url}/dashboard#token={VIEWER}"
    assert link.startswith("https://")
    trusted = ssl.create_default_context(cafile=cert)
    assert httpx.get(f"{server.url}/dashboard", verify=trusted).status_code == 200
    assert {w["name"] for w in dashboard_data(link, verify=trusted)["workers"]} == {"gpu-a", "gpu-b"}
