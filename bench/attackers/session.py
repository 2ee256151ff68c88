"""What every attacker shares: its event log, the fabricated groups, and :class:`Session`, one
worker identity driven by hand through echo2's own client."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
TOKEN_ENV = "ECHO2_TOKEN"
#: What a fabricating attacker claims every token's log-prob was (a confident policy).
INVENTED_LOGPROB = -0.05
#: Declared and heartbeated upload of the fake relay and of the Sybil relays: the top of every relay chain.
HUGE_UPLOAD = 1e12


# ====================================================================== the attackers (child processes)
class EventLog:
    """JSON lines of what an attacker did and what it was answered (the bench reads them)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a")
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        with self.lock:
            self.file.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")
            self.file.flush()


def log_registrations(client: Any, log: EventLog, name: str) -> None:
    """Make ``client`` log each registration it makes (the worker id the coordinator gave it), so
    that the bench can tell which of the coordinator's workers was this attacker."""
    register = client.register

    def registered(request):
        reply = register(request)
        log.emit("registered", worker_id=reply.worker_id, name=name)
        return reply

    client.register = registered


def wait_for_training(run_dir: Path, timeout_s: float = 600.0) -> None:
    """Until the learner has logged its first record (the evaluation before step 0)."""
    metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + timeout_s
    while not (metrics.exists() and metrics.stat().st_size > 0):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run in {run_dir} did not start training within {timeout_s:.0f}s")
        time.sleep(0.2)


def fabricated_groups(prompts: list, spec: Any, tokenizer: Any) -> list:
    """For each prompt: G invented completions, half of them the right answer (computed from the
    prompt, which is plain arithmetic) and half wrong, each token claimed at INVENTED_LOGPROB."""
    from echo2.protocol import Completion, GroupResult

    groups = []
    for prompt in prompts:
        expression = prompt.prompt.rstrip("=")
        truth = eval(expression) if re.fullmatch(r"[0-9+*-]+", expression) else 0
        completions = []
        for i in range(spec.group_size):
            answer = truth if i % 2 == 0 else truth + i
            ids = tokenizer.encode(str(answer), add_special_tokens=False)[: spec.max_new_tokens - 1]
            ids.append(tokenizer.eos_token_id)
            completions.append(Completion(token_ids=ids, logprobs=[INVENTED_LOGPROB] * len(ids)))
        groups.append(GroupResult(slot=prompt.slot, completions=completions))
    return groups


class Session:
    """One worker identity driven by hand through echo2's client. It registers, then heartbeats every
    second, claiming to hold each announced version (a fake fetch event, so that dissemination
    is not left waiting for it), until the coordinator says the run is over."""

    def __init__(self, url: str, token: str, name: str, log: EventLog, relay_url: str | None = None,
                 upload: float | None = None) -> None:
        from echo2.protocol import RegisterRequest
        from echo2.rollout.client import CoordinatorClient

        self.log, self.upload, self.url = log, upload, url
        self.client = CoordinatorClient(url, token, give_up_after_s=10.0)
        reply = self.client.register(RegisterRequest(name=name, relay_url=relay_url, upload_bytes_per_s=upload))
        self.spec, self.worker_id = reply.spec, reply.worker_id
        self.latest = self.client.version().version
        self.stop = threading.Event()
        log.emit("registered", worker_id=self.worker_id, name=name, relay_url=relay_url)
        threading.Thread(target=self._heartbeats, daemon=True, name="attacker-heartbeats").start()

    def _heartbeats(self) -> None:
        from echo2.protocol import Heartbeat, TimelineEvent
        from echo2.rollout.client import CoordinatorUnreachable, RequestRefused

        reported = -1
        while not self.stop.wait(1.0):
            now, latest = time.time(), self.latest
            events = [TimelineEvent(kind="fetch", start=now, end=now, version=latest)] if latest > reported else []
            try:
                reply = self.client.heartbeat(Heartbeat(version=latest, events=events, upload_bytes_per_s=self.upload))
            except CoordinatorUnreachable:
                self.stop.set()
                return
            except RequestRefused:
                continue
            reported = max(reported, latest)
            self.latest = max(self.latest, reply.latest_version)
            if reply.stop:
                self.stop.set()

    def lease(self, version: int | None = None) -> Any:
        """A granted lease at ``version`` (default: the newest published), or None if none was
        granted this time. A refusal is raised as RequestRefused."""
        from echo2.protocol import LeaseRequest

        claimed = self.latest if version is None else version
        reply = self.client.lease(LeaseRequest(version=claimed, max_groups=self.spec.groups_per_lease), wait_s=5.0)
        self.latest = max(self.latest, reply.latest_version)
        if reply.status == "stop":
            self.stop.set()
        return reply if reply.status == "granted" else None

    def submit(self, request: Any, what: str, malicious: bool = True) -> int:
        """Submit ``request``, log the outcome, and return the HTTP status."""
        from echo2.rollout.client import RequestRefused

        slots = [g.slot for g in request.groups]
        try:
            reply = self.client.submit(request)
        except RequestRefused as error:
            self.log.emit("submit_refused", what=what, status=error.status, detail=error.detail, slots=slots,
                          version=request.version, published=self.latest)
            return error.status
        self.log.emit("submitted", what=what, malicious=malicious, accepted=reply.accepted,
                      duplicate=reply.duplicate, slots=slots, version=request.version, published=self.latest)
        return 200

    def granted_lease(self) -> Any:
        """Ask until a lease is granted; None once the run is over or this worker is refused (logged)."""
        from echo2.rollout.client import RequestRefused

        while not self.stop.is_set():
            try:
                lease = self.lease()
            except RequestRefused as error:
                self.log.emit("lease_refused", status=error.status, detail=error.detail)
                if error.status == 403:
                    return None
                time.sleep(0.5)
                continue
            if lease is not None:
                return lease
        return None

    def peer_relay(self, run_dir: Path, timeout_s: float = 5.0) -> str | None:
        """A peer's relay: the one this worker is told to fetch from first, once the plan names one;
        else one named in the run's log. Relay URLs are no secret (every worker the plan puts below
        a relay is sent its URL), but the plan gives a relay parent to the first worker without a
        relay only, so an attacker that is not that one would have to wait for its turn."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            sources = self.client.version().sources
            if sources and sources[0] != "learner":
                self.log.emit("peer_relay", url=sources[0], found_in="version sources")
                return sources[0]
            time.sleep(0.5)
        log_text = (run_dir / "train.log").read_text()
        found = re.search(r"worker local-\d+ joined as \S+ \(relay (https?://[^,)]+)", log_text)
        self.log.emit("peer_relay", url=found.group(1) if found else None, found_in="train.log")
        return found.group(1) if found else None

    def linger(self) -> None:
        """Stay registered (heartbeating) until the run is over."""
        self.stop.wait(900)
