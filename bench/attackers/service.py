"""Attackers of a training service (``echo2 serve``): hand-written Tinker clients that send what no
honest client sends, a second tenant acting on the first's ids, and workers that return samples
they chose (each a real sample of the sampler, with its true log-probs).

Every client here speaks the Tinker wire protocol with ``httpx`` (raw bodies, as an attacker
would), except where the ``tinker`` SDK is the honest client being protected.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx

from attackers.session import EventLog, log_registrations

HEADERS = {"tags": [], "user_metadata": None, "sdk_version": "0.38.0"}


class RawClient:
    """One key's raw view of the API: sessions, clients, futures."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=f"{url}/api/v1", headers={"X-API-Key": key}, timeout=60)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, **kwargs)

    def result(self, request_id: str, timeout_s: float = 120.0) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        while (answer := self.post("/retrieve_future", json={"request_id": request_id})).status_code == 408:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{request_id} not done within {timeout_s:g}s")
        return answer

    def session(self) -> str:
        return self.post("/create_session", json=HEADERS).json()["session_id"]

    def training_client(self, session: str, seq: int, rank: int, base_model: str) -> httpx.Response:
        """The creation's answer: a future (200) or the refusal (400)."""
        return self.post("/create_model", json={"session_id": session, "model_seq_id": seq, "base_model": base_model,
                                                "lora_config": {"rank": rank}})


def forged_key_body(url: str, path: str, announced: int) -> dict[str, Any]:
    """A body of ``announced`` bytes with a forged key, as a raw socket sends it: the headers, then
    the body a MiB at a time until answered. What was answered, and how much body went first."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    sent, started = 0, time.perf_counter()
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-forged\r\nAuthorization: Bearer forged\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n".encode())
        raw.settimeout(0.05)
        answer = b""
        chunk = b"x" * (1 << 20)
        while sent < announced:
            try:
                answer = raw.recv(256)
                if answer:
                    break
            except TimeoutError:
                pass
            try:
                raw.sendall(chunk[: announced - sent])
            except OSError:  # closed by the server after its answer
                break
            sent += min(len(chunk), announced - sent)
        if not answer:
            raw.settimeout(10)
            answer = raw.recv(256)
    status = int(answer.split()[1]) if answer.startswith(b"HTTP/1.1") else None
    return {"status": status, "body_bytes_sent": sent, "seconds": time.perf_counter() - started}


def chosen_worker(kind: str, url: str, token: str, name: str, log: EventLog | None = None) -> None:
    """A real worker behind ``asample`` (or an agent's calls) that returns samples it chose:
    ``chooser`` draws from randomness of its own, ``repeater`` returns a request's first completion
    for all of them, ``cherry_picker`` samples twice and returns the shortest completions of both
    tries. ``log``: where its registration is logged."""
    from echo2.rollout.client import RequestRefused
    from echo2.rollout.worker import RolloutWorker

    own_randomness = 0x5EED

    class Chooser(RolloutWorker):
        def __init__(self) -> None:
            super().__init__(url, token, name=name, relay=None, give_up_after_s=60)
            if log is not None:
                log_registrations(self.client, log, name)

        def _generate(self, lease):
            own = lease.model_copy(update={"draw_seed": lease.draw_seed ^ own_randomness, "samples": [
                s.model_copy(update={"seed": None if s.seed is None else s.seed ^ own_randomness})
                for s in lease.samples]})
            if kind == "chooser":
                return super()._generate(own)
            request, seconds = super()._generate(lease)
            if kind == "repeater":
                samples = [r.model_copy(update={"sequences": [r.sequences[0]] * len(r.sequences)})
                           for r in request.samples]
            else:
                second, more = super()._generate(own)
                seconds += more
                tries = {r.slot: r.sequences for r in second.samples}
                samples = [r.model_copy(update={"sequences": sorted(r.sequences + tries[r.slot],
                                                                    key=lambda s: len(s.token_ids))[:len(r.sequences)]})
                           for r in request.samples]
            return request.model_copy(update={"samples": samples}), seconds

    try:
        Chooser().run()
    except RequestRefused as error:  # its end: quarantined (the coordinator refuses it from now on)
        if error.status != 403:
            raise
        if log is not None:
            log.emit("lease_refused", status=error.status, detail=error.detail)
