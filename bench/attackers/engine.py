"""Engine attackers: a real RolloutWorker that samples honestly and misbehaves around its
submissions (reward claims, the same lease three times, fabricating after an honest start, one
poisoned log-prob after an honest start), or returns real samples it chose rather than drew
(from randomness of its own, one answer G times, its pick of two tries), each with its true
log-probs."""

from __future__ import annotations

import json
import threading
from typing import Any

from attackers.session import EventLog, fabricated_groups, log_registrations
from attackers.trust import POISON_BELOW_FLOOR, POISON_IMPLAUSIBLE, poisoned


def engine_attacker(kind: str, url: str, token: str, name: str, log: EventLog, params: dict[str, Any]) -> None:
    """A real RolloutWorker (honest sampling) that misbehaves around its submissions."""
    import httpx

    from echo2.protocol import AUTH_HEADER, SubmitRequest, SubmitResponse
    from echo2.rollout.client import RequestRefused
    from echo2.rollout.worker import RolloutWorker

    class Attacker(RolloutWorker):
        def __init__(self) -> None:
            super().__init__(url, token, name=name, threads=1, relay=None)
            self.honest_accepted, self.malicious, self.quarantined = 0, False, False
            self._honest_submit, self.client.submit = self.client.submit, self._attack_submit
            log_registrations(self.client, log, name)

        def _post(self, body: str) -> httpx.Response:
            return self.client.http.post("/v1/submit", content=body, headers={
                AUTH_HEADER: self.client.session_token, "content-type": "application/json"})

        def _generate(self, lease):
            if kind in ("chooser", "repeater", "cherry_picker"):
                self.malicious = True
                return chosen(kind, lease, super()._generate, self.spec.group_size)
            if kind == "late_cheater" and self.honest_accepted >= params["honest_groups"]:
                if not self.malicious:
                    log.emit("cheating_from_now", honest_accepted=self.honest_accepted)
                self.malicious = True
                return SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.5,
                                     groups=fabricated_groups(lease.prompts, self.spec, self.generation.tokenizer)), 0.5
            return super()._generate(lease)

        def _attack_submit(self, request):
            slots = [g.slot for g in request.groups]
            if kind == "poison_logprob" and self.honest_accepted >= params["honest_groups"]:
                self.malicious = True  # one token of one completion; the rest of the lease is honest
                below = self._post(poisoned(request, POISON_BELOW_FLOOR))
                log.emit("submit_refused" if below.status_code != 200 else "submitted", what="below the floor",
                         status=below.status_code, detail=below.text[:200], slots=slots, version=request.version,
                         malicious=True, accepted=0, duplicate=False)
                inside = self._post(poisoned(request, POISON_IMPLAUSIBLE))
                reply = inside.json()
                if inside.status_code != 200:
                    log.emit("submit_refused", what="inside the floor", status=inside.status_code,
                             detail=inside.text[:200], slots=slots, version=request.version, malicious=True)
                    if inside.status_code == 403:
                        self.quarantined = True
                    raise RequestRefused(inside.status_code, inside.text[:200])
                log.emit("submitted", what="inside the floor", malicious=True, accepted=reply["accepted"],
                         duplicate=reply.get("duplicate", False), slots=slots, version=request.version)
                return SubmitResponse(**reply)
            if kind == "reward":
                claims = json.loads(request.model_dump_json())
                for group in claims["groups"]:
                    for completion in group["completions"]:
                        completion["reward"] = 1.0
                whole = json.loads(request.model_dump_json())
                whole["rewards"] = [[1.0] * len(g["completions"]) for g in whole["groups"]]
                answers = [self._post(json.dumps(claims)), self._post(json.dumps(whole))]
                log.emit("reward_claims", statuses=[a.status_code for a in answers],
                         details=[a.json().get("detail", "")[:160] for a in answers], slots=slots)
            if kind == "duplicate":
                body, answers = request.model_dump_json(), [None, None]

                def send(i: int) -> None:
                    answers[i] = self._post(body)

                racing = [threading.Thread(target=send, args=(i,)) for i in range(2)]
                for thread in racing:
                    thread.start()
                for thread in racing:
                    thread.join()
                answers.append(self._post(body))  # and once more after the lease is done
                replies = [a.json() for a in answers]
                log.emit("copies", statuses=[a.status_code for a in answers],
                         duplicate=[bool(r.get("duplicate")) for r in replies],
                         accepted=[r.get("accepted") for r in replies], slots=slots)
                kept = [r for a, r in zip(answers, replies) if a.status_code == 200 and not r.get("duplicate")]
                if kept:
                    log.emit("submitted", malicious=False, accepted=kept[0]["accepted"], duplicate=False, slots=slots,
                             version=request.version)
                    self.honest_accepted += kept[0]["accepted"]
                    return SubmitResponse(**kept[0])
                refused = answers[0]
                raise RequestRefused(refused.status_code, refused.text[:200])
            try:
                reply = self._honest_submit(request)
            except RequestRefused as error:
                log.emit("submit_refused", status=error.status, detail=error.detail, slots=slots,
                         version=request.version, malicious=self.malicious)
                if error.status == 403:
                    self.quarantined = True
                raise
            log.emit("submitted", malicious=self.malicious, accepted=reply.accepted, duplicate=reply.duplicate,
                     slots=slots, version=request.version)
            if not self.malicious:
                self.honest_accepted += reply.accepted
            return reply

        def _work_once(self):
            if self.quarantined:  # keep heartbeating (and fetching) until the run is over
                self.stop.wait(1.0)
                return True
            try:
                return super()._work_once()
            except RequestRefused as error:
                if error.status != 403:
                    raise
                log.emit("lease_refused", status=error.status, detail=error.detail)
                self.quarantined = True
                return True

    Attacker().run()


#: What a chooser XORs into the lease's draw seed: randomness of its own.
OWN_RANDOMNESS = 0x5EED


def chosen(kind: str, lease: Any, generate: Any, group_size: int) -> tuple[Any, float]:
    """The submission of a worker that chooses what it returns, every completion a real sample of
    the policy with its true log-probs: ``chooser`` draws from its own randomness, ``repeater``
    returns each group's first completion G times, ``cherry_picker`` samples twice (the lease's
    draws and its own) and returns each group's G shortest of the 2G."""
    own = lease.model_copy(update={"draw_seed": lease.draw_seed ^ OWN_RANDOMNESS})
    if kind == "chooser":
        return generate(own)
    request, seconds = generate(lease)
    if kind == "repeater":
        groups = [g.model_copy(update={"completions": [g.completions[0]] * group_size}) for g in request.groups]
    else:
        second, more = generate(own)
        seconds += more
        tries = {g.slot: g.completions for g in second.groups}
        groups = [g.model_copy(update={"completions": sorted(g.completions + tries[g.slot],
                                                             key=lambda c: len(c.token_ids))[:group_size]})
                  for g in request.groups]
    return request.model_copy(update={"groups": groups}), seconds
