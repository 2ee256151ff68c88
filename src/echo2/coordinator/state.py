"""The coordinator's state: worker registry, prompt leases, admission of groups, replay buffer.

All of it sits behind one lock (a :class:`threading.Condition`), shared by the HTTP handlers
(threads of the server) and the learner loop (main thread). Pacing and freshness decisions are
delegated to :mod:`echo2.staleness`; this module only keeps the books.
"""

from __future__ import annotations

import copy
import logging
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator

from echo2 import staleness as rule
from echo2.broadcast.topology import Node, Plan, star_plan
from echo2.coordinator.cursor import CountingStream
from echo2.coordinator.fleet import Fleet, FleetPolicy
from echo2.coordinator.records import Group, Lease, Limits, WorkerRecord
from echo2.coordinator.versions import VersionBook
from echo2.protocol import (
    HeartbeatResponse,
    LeasedPrompt,
    LeaseResponse,
    RunSpec,
    SubmitRequest,
    SubmitResponse,
    TimelineEvent,
    VersionInfo,
)
from echo2.tasks import Example

log = logging.getLogger("echo2")


class Rejected(Exception):
    """A request refused with an HTTP status and a reason (the state is left unchanged)."""

    def __init__(self, status: int, reason: str, code: str) -> None:
        super().__init__(reason)
        self.status, self.reason, self.code = status, reason, code


class CoordinatorState:
    """Books of one run. ``examples`` is the task's endless training stream (the data cursor)."""

    def __init__(
        self,
        spec: RunSpec,
        limits: Limits,
        examples: Iterator[Example],
        *,
        groups_per_step: int,
        run_token: str,
        lease_timeout_s: float,
        heartbeat_timeout_s: float,
        on_event: Callable[[str, TimelineEvent], None] = lambda worker, event: None,
        planner: Callable[[list[Node]], Plan] = star_plan,
        fleet: Fleet | None = None,
    ) -> None:
        self.spec, self.limits = spec, limits
        self.staleness, self.groups_per_step = spec.staleness, groups_per_step
        self.run_token = run_token
        self.lease_timeout_s, self.heartbeat_timeout_s = lease_timeout_s, heartbeat_timeout_s
        self.on_event = on_event
        self.fleet = fleet or Fleet(FleetPolicy(enabled=False, rollouts_per_step=1, staleness=spec.staleness))
        self.step_times: tuple[float | None, float | None] = (None, None)  # measured T_train, T_bcast
        self.cond = threading.Condition(threading.RLock())
        self.examples = examples if isinstance(examples, CountingStream) else CountingStream(examples)
        self.trained_draws: set[int] = set()  # draw indices of the prompts trained on (see cursor.py)
        self.requeued: deque[Example] = deque()
        self.workers: dict[str, WorkerRecord] = {}
        self._by_session: dict[str, str] = {}
        self.leases: dict[str, Lease] = {}
        self.buffer: list[Group] = []
        self.version = 0
        self.versions = VersionBook(planner, spec.staleness)
        self.useful_slots = 0
        self.next_slot = 0
        self.finished = False
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()

    # ---------------------------------------------------------------- workers
    def register(self, name: str, relay_url: str | None = None, upload_bytes_per_s: float | None = None,
                 price_per_hour: float = 0.0, worker_class: str = "") -> WorkerRecord:
        with self.cond:
            worker_id = f"w{len(self.workers)}-{secrets.token_hex(3)}"
            record = WorkerRecord(worker_id=worker_id, name=name or worker_id, session_token=secrets.token_urlsafe(24),
                                  relay_url=relay_url, upload_bytes_per_s=upload_bytes_per_s,
                                  price_per_hour=price_per_hour, worker_class=worker_class or name or worker_id)
            self.workers[worker_id] = record
            self._by_session[record.session_token] = worker_id
            self.counters["workers_registered"] += 1
            log.info("worker %s joined as %s (relay %s, $%.2f/h)", record.name, worker_id, relay_url or "none",
                     price_per_hour)
            self._replan(f"{record.name} joined")
            self.cond.notify_all()
            return record

    def _replan(self, reason: str) -> None:
        self.fleet.replan(list(self.workers.values()), *self.step_times, reason=reason)

    def replan(self, train_s: float, broadcast_s: float | None) -> None:
        """Re-apply cost-aware activation with the learner's latest step time and dissemination latency."""
        with self.cond:
            self.step_times = (train_s, broadcast_s if broadcast_s is not None else self.step_times[1])
            self._replan("periodic")
            self.cond.notify_all()

    def costs(self, learner_price_per_hour: float, wall_s: float) -> dict[str, float]:
        with self.cond:
            self.fleet.bill(list(self.workers.values()))
            return self.fleet.costs(list(self.workers.values()), learner_price_per_hour, wall_s)

    def authenticate(self, session_token: str | None) -> WorkerRecord:
        worker_id = self._by_session.get(session_token or "")
        if worker_id is None:
            raise Rejected(401, "unknown or missing session credential; register first", "unauthorized")
        record = self.workers[worker_id]
        if not record.alive:
            raise Rejected(410, "this worker was declared dead (no heartbeat); register again", "dead")
        return record

    def heartbeat(self, record: WorkerRecord, version: int, events: list[TimelineEvent],
                  upload_bytes_per_s: float | None = None) -> HeartbeatResponse:
        with self.cond:
            record.last_seen = time.monotonic()
            record.version = version
            if upload_bytes_per_s is not None:  # measured beats declared
                record.upload_bytes_per_s = upload_bytes_per_s
            self._record_events(record, events)
            return HeartbeatResponse(latest_version=self.version, stop=self.finished)

    def _record_events(self, record: WorkerRecord, events: list[TimelineEvent]) -> None:
        for event in events:
            if event.kind == "fetch":
                record.fetches += 1
                record.last_fetch_seconds = event.end - event.start
                record.loaded_version = max(record.loaded_version, event.version)
                self.versions.loaded(event.version, record.worker_id, event.end)
            self.on_event(record.name, event)

    def reap(self) -> None:
        """Declare silent workers dead and expire overdue leases (their prompts are re-queued)."""
        now = time.monotonic()
        with self.cond:
            for record in self.workers.values():
                if record.alive and now - record.last_seen > self.heartbeat_timeout_s:
                    self.fleet.bill(list(self.workers.values()))
                    record.alive = False
                    self.counters["workers_dead"] += 1
                    self._replan(f"{record.name} died")
            for lease in self.leases.values():
                if lease.state == "active" and (now > lease.deadline or not self.workers[lease.worker_id].alive):
                    self._expire(lease)

    def deregister(self, record: WorkerRecord) -> None:
        """A worker leaving on purpose (preemption): its unfinished leases go back to the queue now."""
        with self.cond:
            self.fleet.bill(list(self.workers.values()))
            record.alive, record.left = False, True
            self.counters["workers_left"] += 1
            returned = [lease for lease in self.leases.values()
                        if lease.state == "active" and lease.worker_id == record.worker_id]
            for lease in returned:
                self._expire(lease)
            log.info("worker %s left (deregistered); %d unfinished leases re-issued", record.name, len(returned))
            self._replan(f"{record.name} left")

    def quarantine(self, worker_id: str, reason: str, taken: list[Group] = ()) -> int:
        """Stop trusting a worker whose results failed verification: no more leases or submissions,
        its active leases re-issued, its buffered groups — and ``taken``, its groups already in the
        learner's batch — discarded (prompts re-queued). Returns how many groups were discarded."""
        with self.cond:
            for group in taken:
                self.useful_slots -= 1
                self.requeued.append(group.example)
                self._untrain(group)
            self.dropped["quarantined"] += len(taken)
            record = self.workers[worker_id]
            if record.quarantined:
                return 0
            record.quarantined = True
            self.counters["workers_quarantined"] += 1
            for lease in self.leases.values():
                if lease.state == "active" and lease.worker_id == worker_id:
                    self._expire(lease)
            mine = [g for g in self.buffer if g.worker_id == worker_id]
            self.buffer = [g for g in self.buffer if g.worker_id != worker_id]
            for group in mine:
                self.useful_slots -= 1
                self.requeued.append(group.example)
            self.dropped["quarantined"] += len(mine)
            log.warning("quarantined worker %s: %s (%d groups discarded)", record.name, reason, len(mine) + len(taken))
            self.cond.notify_all()
            return len(mine) + len(taken)

    def _refuse_quarantined(self, record: WorkerRecord) -> None:
        if record.quarantined:
            raise Rejected(403, "this worker is quarantined: its results failed verification", "quarantined")

    def _expire(self, lease: Lease) -> None:
        lease.state = "expired"
        self.counters["leases_expired"] += 1
        self.useful_slots -= len(lease.examples)
        self.counters["prompts_requeued"] += len(lease.examples)
        self.requeued.extendleft(reversed(list(lease.examples.values())))
        self.cond.notify_all()

    # ---------------------------------------------------------------- leases
    def _grantable(self, worker_version: int) -> str:
        """'granted' if a slot can go to a worker at this version now, else why not."""
        if self.finished:
            return "stop"
        if self.useful_slots >= rule.lease_window(self.version, self.staleness, self.groups_per_step):
            return "wait"
        if not rule.worker_can_take(self.useful_slots, worker_version, self.staleness, self.groups_per_step):
            return "refresh"
        return "granted"

    def lease(self, record: WorkerRecord, worker_version: int, max_groups: int, wait_s: float) -> LeaseResponse:
        deadline = time.monotonic() + wait_s
        with self.cond:
            self._refuse_quarantined(record)
            record.last_seen = time.monotonic()
            record.version = worker_version
            if worker_version > self.version:
                raise Rejected(409, f"version {worker_version} is newer than the published {self.version}", "bad_version")
            while not record.active and not self.finished and time.monotonic() < deadline:
                self.cond.wait(min(deadline - time.monotonic(), 0.5))
            if not record.active and not self.finished:
                return LeaseResponse(status="parked", latest_version=self.version)
            while (status := self._grantable(worker_version)) == "wait":
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.cond.wait(min(remaining, 0.5))
                self.reap()
            if status != "granted":
                return LeaseResponse(status=status, latest_version=self.version)
            examples: dict[int, Example] = {}
            while len(examples) < max_groups and self._grantable(worker_version) == "granted":
                example = self.requeued.popleft() if self.requeued else next(self.examples)
                examples[self.next_slot] = example
                self.next_slot += 1
                self.useful_slots += 1
            lease = Lease(
                lease_id=secrets.token_hex(8),
                worker_id=record.worker_id,
                version=worker_version,
                examples=examples,
                deadline=time.monotonic() + self.lease_timeout_s,
            )
            self.leases[lease.lease_id] = lease
            self.counters["leases_issued"] += 1
            return LeaseResponse(
                status="granted",
                latest_version=self.version,
                lease_id=lease.lease_id,
                version=worker_version,
                deadline_s=self.lease_timeout_s,
                prompts=[LeasedPrompt(slot=s, prompt=e.prompt, answer=e.answer) for s, e in examples.items()],
            )

    # ---------------------------------------------------------------- submissions
    def _reject(self, record: WorkerRecord, status: int, reason: str, code: str) -> Rejected:
        record.rejected += 1
        self.rejected[code] += 1
        return Rejected(status, reason, code)

    def _validate(self, record: WorkerRecord, request: SubmitRequest) -> Lease:
        lease = self.leases.get(request.lease_id)
        if lease is None or lease.worker_id != record.worker_id:
            raise self._reject(record, 404, f"lease {request.lease_id!r} is not one of yours", "unknown_lease")
        if lease.state == "expired":
            raise self._reject(record, 409, "lease expired; its prompts were re-issued", "expired_lease")
        if request.version != lease.version:
            raise self._reject(
                record, 422, f"version {request.version} differs from the lease's {lease.version}", "bad_version"
            )
        slots = [g.slot for g in request.groups]
        if sorted(slots) != sorted(lease.examples):
            raise self._reject(record, 422, "groups do not match the lease's slots one to one", "bad_slots")
        low, high = self.limits.reward_range
        for group in request.groups:
            if len(group.completions) != self.limits.group_size:
                raise self._reject(
                    record, 422, f"slot {group.slot}: {len(group.completions)} completions, "
                    f"expected {self.limits.group_size}", "bad_group_size"
                )
            for c in group.completions:
                if len(c.token_ids) != len(c.logprobs):
                    raise self._reject(record, 422, f"slot {group.slot}: token_ids and logprobs differ in length",
                                       "bad_shape")
                if len(c.token_ids) > self.limits.max_new_tokens:
                    raise self._reject(record, 422, f"slot {group.slot}: completion longer than "
                                       f"max_new_tokens={self.limits.max_new_tokens}", "too_long")
                if min(c.token_ids) < 0 or max(c.token_ids) >= self.limits.vocab_size:
                    raise self._reject(record, 422, f"slot {group.slot}: token id outside the vocabulary", "bad_token")
                if not low <= c.reward <= high:
                    raise self._reject(record, 422, f"slot {group.slot}: reward {c.reward} outside [{low}, {high}]",
                                       "bad_reward")
        return lease

    def submit(self, record: WorkerRecord, request: SubmitRequest) -> SubmitResponse:
        with self.cond:
            self._refuse_quarantined(record)
            record.last_seen = time.monotonic()
            lease = self.leases.get(request.lease_id)
            if lease is not None and lease.worker_id == record.worker_id and lease.state == "done":
                self.counters["duplicate_submissions"] += 1
                return SubmitResponse(accepted=0, duplicate=True)
            lease = self._validate(record, request)
            lease.state = "done"
            self.counters["leases_completed"] += 1
            self.fleet.observe(record, sum(len(g.completions) for g in request.groups),
                               time.monotonic() - lease.granted_at)
            for group in request.groups:
                self.buffer.append(
                    Group(
                        slot=group.slot,
                        example=lease.examples[group.slot],
                        version=lease.version,
                        worker_id=record.worker_id,
                        token_ids=[c.token_ids for c in group.completions],
                        logprobs=[c.logprobs for c in group.completions],
                        rewards=[c.reward for c in group.completions],
                    )
                )
                record.samples += len(group.completions)
                record.tokens += sum(len(c.token_ids) for c in group.completions)
            record.groups += len(request.groups)
            record.generate_seconds += request.generate_seconds
            self.counters["groups_accepted"] += len(request.groups)
            self._record_events(record, request.events)
            self.cond.notify_all()
            return SubmitResponse(accepted=len(request.groups))

    # ---------------------------------------------------------------- learner side
    def take_batch(self, step: int, timeout_s: float, count: int | None = None) -> list[Group]:
        """Block until ``count`` (default ``groups_per_step``) groups fresh for ``step`` are
        buffered; return them.

        Stale groups are dropped (counted, prompts re-queued). Oldest versions go first, so that
        nothing that is still usable ages out while newer groups are trained on.
        """
        count = self.groups_per_step if count is None else count
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                self._drop_stale(step)
                if len(self.buffer) >= count:
                    self.buffer.sort(key=lambda g: (g.version, g.slot))
                    batch = self.buffer[:count]
                    del self.buffer[:count]
                    for group in batch:
                        self._train(group)
                    return batch
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    alive = sum(w.alive for w in self.workers.values())
                    raise TimeoutError(
                        f"waited {timeout_s:.0f}s for {count} rollout groups for step {step} "
                        f"(have {len(self.buffer)}; {alive} live workers)"
                    )
                self.cond.wait(min(remaining, 0.5))
                self.reap()

    def filter_taken(self, groups: list[Group]) -> None:
        """Groups the learner took but filters out instead of training on (DAPO's dynamic sampling
        drops groups whose rewards are all equal): their slots stop counting against the pacing
        window, so that replacements are leased at once; their prompts are used up, not re-queued."""
        with self.cond:
            for group in groups:
                self.useful_slots -= 1
                self._untrain(group)
            self.dropped["filtered"] += len(groups)
            self.cond.notify_all()

    def _train(self, group: Group) -> None:
        draw = getattr(group.example, "draw", -1)
        if draw in self.trained_draws:
            self.counters["groups_trained_twice"] += 1
        self.trained_draws.add(draw)
        self.counters["groups_trained"] += 1

    def _untrain(self, group: Group) -> None:
        """``group`` left the learner's batch untrained (quarantined or filtered after it was taken)."""
        self.trained_draws.discard(getattr(group.example, "draw", -1))
        self.counters["groups_trained"] -= 1

    def _drop_stale(self, step: int) -> None:
        fresh = []
        for group in self.buffer:
            if rule.is_fresh(step, group.version, self.staleness):
                fresh.append(group)
            else:
                self.dropped["stale"] += 1
                self.useful_slots -= 1
                self.requeued.append(group.example)
        self.buffer = fresh

    def publish(self, version: int, sha256: str, size_bytes: int) -> None:
        """Announce ``version`` (its chunks are already served) and plan who relays it to whom."""
        with self.cond:
            live = [Node(r.worker_id, r.upload_bytes_per_s or 0.0, reachable=r.relay_url is not None)
                    for r in self.workers.values() if r.alive]
            self.versions.publish(version, sha256, size_bytes, live)
            self.version = version
            self.cond.notify_all()

    def version_info(self, record: WorkerRecord) -> VersionInfo:
        """The current version, with the sources ``record`` should fetch it from (parent first)."""
        with self.cond:
            urls = {r.worker_id: r.relay_url for r in self.workers.values() if r.alive and r.relay_url}
            return self.versions.info_for(self.version, record.worker_id, urls)

    def pop_disseminated(self) -> list[tuple[int, float, float]]:
        """See :meth:`VersionBook.pop_disseminated`."""
        with self.cond:
            return self.versions.pop_disseminated([r.loaded_version for r in self.workers.values() if r.alive])

    def versions_spreading(self) -> bool:
        """Whether some published version has not reached every live worker yet."""
        with self.cond:
            return self.versions.spreading()

    def wait_for_workers(self, count: int, timeout_s: float, still_starting: Callable[[], None]) -> None:
        """Block until ``count`` workers have registered; ``still_starting`` raises if they cannot."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.counters["workers_registered"] < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {timeout_s:.0f}s for {count} local workers to register "
                                       f"({self.counters['workers_registered']} did)")
                still_starting()
                self.cond.wait(0.2)

    def reliability(self) -> dict[str, int | dict[str, int]]:
        """The run's reliability report: what happened to every lease and every submitted group."""
        with self.cond:
            active = sum(lease.state == "active" for lease in self.leases.values())
            in_flight = sum(len(lease.examples) for lease in self.leases.values() if lease.state == "active")
            accounted = (self.counters["groups_trained"] + self.dropped["filtered"] + len(self.buffer)
                         + len(self.requeued) + in_flight)
            return {
                "prompts_drawn": self.examples.drawn,
                "prompts_unaccounted": self.examples.drawn - accounted,
                "groups_trained": self.counters["groups_trained"],
                "groups_trained_twice": self.counters["groups_trained_twice"],
                "leases_issued": self.counters["leases_issued"],
                "leases_completed": self.counters["leases_completed"],
                "leases_expired": self.counters["leases_expired"],
                "leases_outstanding": active,
                "prompts_requeued": self.counters["prompts_requeued"] + self.dropped["stale"]
                + self.dropped["quarantined"],
                "groups_accepted": self.counters["groups_accepted"],
                "groups_rejected": dict(self.rejected),
                "duplicate_submissions": self.counters["duplicate_submissions"],
                "groups_dropped_stale": self.dropped["stale"],
                "groups_discarded_quarantined": self.dropped["quarantined"],
                "groups_filtered_degenerate": self.dropped["filtered"],
                "groups_buffered": len(self.buffer),
                "workers_registered": self.counters["workers_registered"],
                "workers_dead": self.counters["workers_dead"],
                "workers_left": self.counters["workers_left"],
                "workers_quarantined": self.counters["workers_quarantined"],
                "learner_restarts": self.counters["learner_restarts"],
                "leases_lost_in_restart": self.counters["leases_lost_in_restart"],
            }

    def worker_records(self) -> list[WorkerRecord]:
        """A consistent copy of the registry, safe to read outside the lock."""
        with self.cond:
            return [copy.copy(record) for record in self.workers.values()]

    def finish(self) -> None:
        with self.cond:
            self.finished = True
            self.cond.notify_all()
