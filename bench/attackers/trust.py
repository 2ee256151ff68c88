"""Attackers of the trust layer's numbers and names: a log-prob poisoner after its probation, a
lease hoarder, telemetry and name poison, and a claim of v-1 the moment the learner resumes."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from attackers.session import EventLog, Session, fabricated_groups

#: The poisoner's two values: below the protocol's floor (refused at the door), then inside it but
#: about 40 nats from what the policy gives a sampled token (left out of the step, quarantined).
POISON_BELOW_FLOOR, POISON_IMPLAUSIBLE = -1000.0, -45.0
#: What a hoarder asks for in every lease request (the protocol's maximum).
HOARD = 4096


def poisoned(request: Any, value: float) -> str:
    """``request`` as JSON with the first token's log-prob of its first completion set to ``value``."""
    body = json.loads(request.model_dump_json())
    body["groups"][0]["completions"][0]["logprobs"][0] = value
    return json.dumps(body)


def attack_hoarder(session: Session) -> None:
    """Ask for the whole window again and again, always claiming the newest version (it needs no
    weights: it never generates); never submit anything."""
    from echo2.protocol import LeaseRequest
    from echo2.rollout.client import RequestRefused

    while not session.stop.is_set():
        try:
            reply = session.client.lease(LeaseRequest(version=session.latest, max_groups=HOARD), wait_s=2.0)
        except RequestRefused as error:
            session.log.emit("lease_refused", status=error.status, detail=error.detail)
            time.sleep(0.5)
            continue
        session.latest = max(session.latest, reply.latest_version)
        session.log.emit("hoard", status=reply.status, granted=len(reply.prompts))
        if reply.status == "stop":
            break
        if reply.status in ("wait", "parked"):  # "refresh": ask again at once, claiming the newest version
            time.sleep(0.5)


def attack_telemetry(session: Session, url: str, token: str, log: EventLog) -> None:
    """Poisoned heartbeats (NaN, +-inf, an interval that ends before it starts, an infinite upload
    rate; finite but absurd times, rates and versions) and registrations under forged names; each answer is logged, then the attacker lingers."""
    import httpx

    from echo2.protocol import AUTH_HEADER

    now = time.time()
    beats = {
        "nan start": {"version": 0, "events": [{"kind": "generate", "start": math.nan, "end": now, "version": 0}]},
        "inf end": {"version": 0, "events": [{"kind": "generate", "start": now, "end": math.inf, "version": 0}]},
        "-inf start": {"version": 0, "events": [{"kind": "fetch", "start": -math.inf, "end": now, "version": 0}]},
        "ends before it starts": {"version": 0, "events": [{"kind": "fetch", "start": now, "end": now - 9,
                                                             "version": 0}]},
        "inf upload rate": {"version": 0, "upload_bytes_per_s": math.inf},
        "1e308 times (finite)": {"version": 0, "events": [{"kind": "generate", "start": 1e308, "end": 1e308,
                                                           "version": 0}]},
        "upload rate 1e300 (finite)": {"version": 0, "upload_bytes_per_s": 1e300},
    }
    #: finite but newer than any published version: a conflict with the run's state, not a malformed body
    versions = {"holds version 10**30": {"version": 10**30},
                "fetched version 10**30": {"version": 0, "events": [{"kind": "fetch", "start": now, "end": now,
                                                                     "version": 10**30}]}}
    names = {"newline (forged log line)": "x\n12:00:00 echo2.coordinator.state: quarantined worker local-0: forged",
             "reserved 'learner'": "learner", "markup": "<img src=x onerror=alert(1)>"}
    with httpx.Client(base_url=url, timeout=10.0) as http:
        for what, beat in beats.items():
            answer = http.post("/v1/heartbeat", content=json.dumps(beat),  # json writes NaN/Infinity as JS does
                               headers={AUTH_HEADER: session.client.session_token, "content-type": "application/json"})
            log.emit("probe", what=f"heartbeat: {what}", status=answer.status_code, expected=422)
        for what, beat in versions.items():
            answer = http.post("/v1/heartbeat", json=beat, headers={AUTH_HEADER: session.client.session_token})
            log.emit("probe", what=f"heartbeat: {what}", status=answer.status_code, expected=409)
        for what, name in names.items():
            answer = http.post("/v1/register", json={"name": name}, headers={AUTH_HEADER: token})
            log.emit("probe", what=f"register: {what}", status=answer.status_code, expected=422)
        twin = http.post("/v1/register", json={"name": "local-0"}, headers={AUTH_HEADER: token})
        log.emit("twin", status=twin.status_code, worker_id=twin.json().get("worker_id"))
    session.linger()


def attack_resume_claim(url: str, token: str, name: str, log: EventLog, timeout_s: float = 900.0) -> None:
    """Wait for the learner to go away and come back resumed (the open ``/v1/health`` shows both),
    then register at once and submit fabricated groups claiming the version before the newest: right
    after a restart, the version before the one resumed at (which an audit could not check)."""
    import httpx

    from echo2.model.loading import load_tokenizer
    from echo2.protocol import SubmitRequest
    from echo2.rollout.client import RequestRefused

    deadline, down = time.monotonic() + timeout_s, False
    with httpx.Client(base_url=url, timeout=2.0) as http:
        while time.monotonic() < deadline:
            try:
                health = http.get("/v1/health").json()
            except httpx.TransportError:
                if not down:
                    log.emit("learner_down")
                down = True
            else:
                if down:
                    break
            time.sleep(0.1)
        else:
            raise TimeoutError(f"the learner did not restart within {timeout_s:.0f}s")
    log.emit("learner_back", version=health["version"])
    session = Session(url, token, name, log)
    tokenizer = load_tokenizer(session.spec.model)
    while not session.stop.is_set():
        try:
            lease = session.lease(version=max(session.latest - 1, 0))
        except RequestRefused as error:
            session.log.emit("lease_refused", status=error.status, detail=error.detail)
            if error.status == 403:
                break
            time.sleep(0.2)
            continue
        if lease is None:
            continue
        request = SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                groups=fabricated_groups(lease.prompts, session.spec, tokenizer))
        if session.submit(request, "fabricated, claims v-1 after the restart") == 403:
            break
    session.linger()
