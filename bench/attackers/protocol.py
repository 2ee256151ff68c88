"""Protocol attackers: fabricated groups at the current or an older version, a replay of an
honest worker's groups, Sybil identities, and a result after its lease expired."""

from __future__ import annotations

import threading
import time
from typing import Any

from attackers.session import EventLog, Session, fabricated_groups


def attack_fabricate(session: Session, tokenizer: Any, claim_older: bool) -> None:
    from echo2.protocol import SubmitRequest

    while (lease := session.granted_lease()) is not None:
        if claim_older:  # hold the lease until a newer version is out: the submission then claims v - 1
            deadline = time.monotonic() + 120
            while not session.stop.is_set() and time.monotonic() < deadline:
                session.latest = max(session.latest, session.client.version().version)
                if session.latest > lease.version:
                    break
                time.sleep(0.1)
        request = SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                groups=fabricated_groups(lease.prompts, session.spec, tokenizer))
        if session.submit(request, "fabricated, claims v-1" if claim_older else "fabricated") == 403:
            break
    after_quarantine(session)


def attack_sybil_fabricate(url: str, token: str, name: str, log: EventLog, count: int, spacing_s: float) -> None:
    """``count`` identities, one every ``spacing_s``, each fabricating until it is quarantined (one
    lease each, in practice). Spaced so that each one's groups share a batch with honest groups."""
    from echo2.model.loading import load_tokenizer

    tokenizer, threads = None, []
    for i in range(count):
        session = Session(url, token, f"{name}-{i}", log)
        tokenizer = tokenizer or load_tokenizer(session.spec.model)
        threads.append(threading.Thread(target=attack_fabricate, args=(session, tokenizer, False), daemon=True))
        threads[-1].start()
        if session.stop.wait(spacing_s):
            break
    for thread in threads:
        thread.join()


def after_quarantine(session: Session) -> None:
    """Once refused: one more lease request, to show that the refusal (403) is for good."""
    from echo2.rollout.client import RequestRefused

    if session.stop.is_set():
        return
    try:
        session.lease()
        session.log.emit("after_quarantine", status=200)
    except RequestRefused as error:
        session.log.emit("after_quarantine", status=error.status, detail=error.detail)
    session.linger()


def make_tap(url: str, token: str, log: EventLog, sink: list) -> Any:
    """An honest RolloutWorker whose every submission the attacker sees (``sink``)."""
    from echo2.rollout.worker import RolloutWorker

    worker = RolloutWorker(url, token, name="honest-tap", threads=1, relay=None)
    submit = worker.client.submit

    def tapped(request):
        reply = submit(request)
        sink.append(request)
        log.emit("tap_submitted", slots=[g.slot for g in request.groups], version=request.version,
                 accepted=reply.accepted)
        return reply

    worker.client.submit = tapped
    return worker


def attack_replay(session: Session, url: str, token: str) -> None:
    from echo2.protocol import GroupResult, SubmitRequest

    seen: list = []
    tap = make_tap(url, token, session.log, seen)
    threading.Thread(target=tap.run, daemon=True, name="honest-tap").start()
    probed = False
    while not session.stop.is_set():
        if not seen:
            time.sleep(0.2)
            continue
        lease = session.granted_lease()
        if lease is None:
            break
        source = seen[-1]  # the newest honest submission (a submission must claim its lease's version)
        if not probed:
            probed = True
            session.submit(source, "verbatim: the honest worker's own lease")
            session.submit(SubmitRequest(lease_id=lease.lease_id, version=lease.version, groups=source.groups,
                                         generate_seconds=0.5), "own lease, the honest worker's slots")
            session.log.emit("replayed_from", tap_version=source.version, lease_version=lease.version)
        groups = [GroupResult(slot=p.slot, completions=source.groups[i % len(source.groups)].completions)
                  for i, p in enumerate(lease.prompts)]
        request = SubmitRequest(lease_id=lease.lease_id, version=lease.version, groups=groups, generate_seconds=0.5)
        if session.submit(request, "re-slotted onto its own lease") == 403:
            break
    tap.stop.set()
    after_quarantine(session)


def attack_late_lease(session: Session, tokenizer: Any) -> None:
    from echo2.protocol import SubmitRequest

    for what, late_s in (("late", 2.5), ("late", 2.5), ("just_late", 0.2)):
        lease = session.granted_lease()
        if lease is None:
            break
        time.sleep(lease.deadline_s + late_s)
        request = SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                groups=fabricated_groups(lease.prompts, session.spec, tokenizer))
        if session.submit(request, what) == 403:
            break
    session.linger()
