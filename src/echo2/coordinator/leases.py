"""Leases: which worker holds which prompt slots, until when; and the checks a submission must pass.

A lease binds the slots the pacing ledger granted (and their prompts) to one worker, one policy
version and a deadline. A submission must answer one of the submitter's own active leases, at
the lease's version, within the run's limits: a task's lease some of its open slots at a time (a
streaming worker submits each group as its rows finish; the lease is done once every slot is
answered), a sampling lease all its requests at once; anything else is refused with a specific
code before it can touch the buffer (and counted by code). A submission carries tokens
and log-probs only: the rewards of its groups are the coordinator's own, computed between
:meth:`LeaseBook.claim` and :meth:`LeaseBook.settle` (:mod:`echo2.coordinator.scoring`). Not
locked on its own: :class:`echo2.coordinator.state.CoordinatorState` calls it under its lock.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from echo2.coordinator.records import Lease, Limits, Rejected, WorkerRecord, check_telemetry, session_refusal
from echo2.coordinator.scoring import Unscorable
from echo2.core.draw_rule import row_key
from echo2.exchange import Group
from echo2.model.episodes import segments
from echo2.protocol import RespondRequest, SubmitRequest


class LeaseBook:
    """Every lease of the run by id (the books keep the active ones: :class:`echo2.core.books.Books`),
    and the refusals, counted by code into ``rejected`` (the books')."""

    def __init__(self, rejected: Counter[str]) -> None:
        self.leases: dict[str, Lease] = {}
        self.rejected = rejected

    def add(self, lease: Lease) -> None:
        """A lease the books granted."""
        self.leases[lease.lease_id] = lease

    def get(self, lease_id: str) -> Lease | None:
        return self.leases.get(lease_id)

    def playing(self, request: RespondRequest, record: WorkerRecord, limits: Limits) -> Lease:
        """``record``'s active lease whose episodes ``request`` asks the environment's next answers
        for (none past ``limits.max_turns`` model turns, and no more answers in all than the
        lease's episodes can use: each costs the coordinator an environment call and memory);
        else the refusal (counted)."""
        lease_id, slots, max_turns = request.lease_id, [item.slot for item in request.items], limits.max_turns
        lease = self.get(lease_id)
        try:
            if any(len(item.replies) >= max_turns for item in request.items):
                raise Rejected(422, f"an episode asks for an answer after {max_turns} model turns, the most it "
                                    "may take", "too_many_turns")
            if record.quarantined:
                raise Rejected(403, "this worker is quarantined: its results failed verification", "quarantined")
            if lease is None or lease.worker_id != record.worker_id:
                raise Rejected(404, f"lease {lease_id!r} is not one of yours", "unknown_lease")
            if not set(slots) <= set(lease.slots):
                raise Rejected(422, "slots that are not the lease's", "bad_slots")
            if lease.state != "active" or not set(slots) <= set(lease.unanswered) - lease.scoring:
                raise Rejected(409, f"lease {lease_id!r} is {lease.state if lease.state != 'active' else 'submitted'}"
                               f"{' for these slots' if lease.state == 'active' else ''}",
                               "expired_lease" if lease.state == "expired" else "lease_done")
            budget = len(lease.slots) * limits.group_size * (max_turns - 1)
            if len(lease.answers) + len(request.items) > budget:
                raise Rejected(422, f"more environment answers than this lease's episodes can use ({budget})",
                               "too_many_answers")
            if (problem := transcript_problem(lease.answers, request, limits.group_size)) is not None:
                raise Rejected(422, problem, "not_a_transcript")
        except Rejected as refusal:
            raise self._refused(record, refusal) from None
        return lease

    def claim(self, request: SubmitRequest, record: WorkerRecord, limits: Limits, latest: int) -> Lease | None:
        """The lease ``request`` validly answers, now marked as being scored; None when ``request`` is
        a copy of one of ``record``'s leases already submitted or still being scored (a duplicate);
        else the refusal (counted). ``latest``: the newest published version."""
        lease, slots = self.get(request.lease_id), submitted_slots(request)
        try:
            if record.quarantined:
                raise Rejected(403, "this worker is quarantined: its results failed verification", "quarantined")
            if lease is not None and lease.worker_id == record.worker_id and slots <= lease.answered | lease.scoring:
                return None  # also to a worker declared dead since: it learns that its first copy was kept
            if (refusal := session_refusal(record)) is not None:
                raise refusal
            lease = check_submission(lease, record.worker_id, request, limits, latest)
        except Rejected as refusal:
            raise self._refused(record, refusal) from None
        lease.scoring |= slots
        return lease

    def settle(self, lease: Lease, record: WorkerRecord, request: SubmitRequest,
               rewards: list[list[float]] | Unscorable) -> None:
        """Settle ``request``, a claimed submission of ``lease``, once it was scored (``rewards``
        :class:`Unscorable`: why it could not be): accepted, unless the lease expired or its worker
        was quarantined meanwhile (the refusal, counted; the lease stays expired and its prompts
        re-queued, or active until it expires); the books then take its groups in
        (:meth:`echo2.core.books.Books.answered`)."""
        lease.scoring -= submitted_slots(request)
        if record.quarantined:
            raise self._refused(record, Rejected(403, "this worker was quarantined while its results were scored",
                                                 "quarantined"))
        if lease.state == "expired":
            raise self._refused(record, Rejected(409, "lease expired while it was scored; its prompts were "
                                                 "re-issued", "expired_lease"))
        if isinstance(rewards, Unscorable):
            raise self._refused(record, Rejected(422, f"these completions could not be scored: {rewards.reason}",
                                                 rewards.code))

    def _refused(self, record: WorkerRecord, refusal: Rejected) -> Rejected:
        record.rejected += 1
        record.last_error = f"{refusal.code}: {refusal.reason}"
        self.rejected[refusal.code] += 1
        return refusal


def check_submission(lease: Lease | None, worker_id: str, request: SubmitRequest, limits: Limits, latest: int
                     ) -> Lease:
    """``lease`` if ``request`` is a valid answer to it from ``worker_id``; else the refusal."""
    if lease is None or lease.worker_id != worker_id:
        raise Rejected(404, f"lease {request.lease_id!r} is not one of yours", "unknown_lease")
    if lease.state == "expired":
        raise Rejected(409, "lease expired; its prompts were re-issued", "expired_lease")
    if time.monotonic() > lease.deadline:  # the deadline itself, not the sweeper's next pass
        raise Rejected(409, "lease deadline passed; its prompts go to another worker", "expired_lease")
    if request.version != lease.version:
        raise Rejected(422, f"version {request.version} differs from the lease's {lease.version}", "bad_version")
    check_telemetry(lease.version, request.events, latest, time.time())
    if lease.kind == "sample":
        check_samples(lease, request, limits)
        return lease
    slots = [g.slot for g in request.groups]
    if len(set(slots)) != len(slots) or not set(slots) <= set(lease.unanswered) - lease.scoring:
        raise Rejected(422, "groups must answer the lease's open slots, each once", "bad_slots")
    for group in request.groups:
        if len(group.completions) != limits.group_size:
            raise Rejected(422, f"slot {group.slot}: {len(group.completions)} completions, "
                           f"expected {limits.group_size}", "bad_group_size")
        for c in group.completions:
            if len(c.token_ids) != len(c.logprobs):
                raise Rejected(422, f"slot {group.slot}: token_ids and logprobs differ in length", "bad_shape")
            turns = [end - start for start, end, own in segments(c.mask) if own] if c.mask else [len(c.token_ids)]
            if max(turns) > limits.max_new_tokens:
                raise Rejected(422, f"slot {group.slot}: a turn longer than "
                               f"max_new_tokens={limits.max_new_tokens}", "too_long")
            if len(turns) > limits.max_turns:
                raise Rejected(422, f"slot {group.slot}: {len(turns)} model turns, at most {limits.max_turns}",
                               "too_many_turns")
            if (problem := _turn_versions_problem(c.turn_versions, len(turns), lease.version, latest)) is not None:
                raise Rejected(422, f"slot {group.slot}: {problem}", "bad_version")
            if c.switches and not lease.version < c.switches[0].version <= c.switches[-1].version <= latest:
                raise Rejected(422, f"slot {group.slot}: switches to {[s.version for s in c.switches]} must be to versions after the "
                                    f"lease's v{lease.version}, none past v{latest}", "bad_version")
            if min(c.token_ids) < 0 or max(c.token_ids) >= limits.vocab_size:
                raise Rejected(422, f"slot {group.slot}: token id outside the vocabulary", "bad_token")
    return lease


def submitted_slots(request: SubmitRequest) -> set[int]:
    """The slots ``request`` answers."""
    return {g.slot for g in request.groups} | {r.slot for r in request.samples}


def check_samples(lease: Lease, request: SubmitRequest, limits: Limits) -> None:
    """The refusal when ``request`` is not a valid answer to the sampling ``lease`` (its own, active,
    checked by :meth:`LeaseBook.claim`): one result per request, slot for slot, each with the
    completions asked for, none longer than asked, every token in the vocabulary, prompt
    log-probs exactly when asked for."""
    if request.groups or sorted(r.slot for r in request.samples) != sorted(lease.slots):
        raise Rejected(422, "sample results do not match the lease's requests one to one", "bad_slots")
    for result in request.samples:
        asked = lease.slots[result.slot].request
        if len(result.sequences) != asked.num_samples:
            raise Rejected(422, f"slot {result.slot}: {len(result.sequences)} completions, {asked.num_samples} "
                                "asked for", "bad_group_size")
        for sequence in result.sequences:
            if len(sequence.token_ids) != len(sequence.logprobs):
                raise Rejected(422, f"slot {result.slot}: token_ids and logprobs differ in length", "bad_shape")
            if len(sequence.token_ids) > asked.max_tokens:
                raise Rejected(422, f"slot {result.slot}: longer than max_tokens={asked.max_tokens}", "too_long")
            if min(sequence.token_ids) < 0 or max(sequence.token_ids) >= limits.vocab_size:
                raise Rejected(422, f"slot {result.slot}: token id outside the vocabulary", "bad_token")
        expected = len(asked.prompt_ids) - 1 if asked.prompt_logprobs else None
        given = None if result.prompt_logprobs is None else len(result.prompt_logprobs)
        if given != expected:
            raise Rejected(422, f"slot {result.slot}: {given} prompt log-probs, expected {expected}", "bad_shape")


def transcript_problem(answers: dict[tuple[int, tuple[str, ...]], str | None], request: RespondRequest,
                       group_size: int) -> str | None:
    """Why ``request`` is not the next turns of a lease's episodes, given what the environment
    answered them so far (``answers``), or None. Each item must continue an episode: its replies
    but the last are a transcript already answered, and not ended (None), and a slot starts no
    more episodes than its group holds. Else a worker could ask the environment about any reply
    it likes: against the retry task's higher/lower feedback, 9-10 made-up replies to one
    prompt found its secret answer in the episode's budget of 16, 8 of 8 times. What is answered
    must then be submitted (:meth:`echo2.coordinator.scoring.Scoring.rewards`)."""
    started: dict[int, set[str]] = {}
    for slot, replies in answers:
        if len(replies) == 1:
            started.setdefault(slot, set()).add(replies[0])
    for item in request.items:
        replies = tuple(item.replies)
        if len(replies) > 1 and answers.get((item.slot, replies[:-1])) is None:
            return (f"slot {item.slot}: reply {len(replies)} follows a turn the environment did not answer (or "
                    "ended): an episode's turns come one after another")
        if len(replies) == 1 and (item.slot, replies) not in answers:
            started.setdefault(item.slot, set()).add(replies[0])
            if len(started[item.slot]) > group_size:
                return f"slot {item.slot}: more than its group's {group_size} episodes"
    return None


def _turn_versions_problem(turn_versions: list[int] | None, turns: int, leased: int, latest: int) -> str | None:
    """Why an episode's per-turn versions cannot be right, or None. Its first turn is sampled at the
    lease's version (staleness counts from the oldest turn); later turns at that or a newer one,
    never one not yet published."""
    if turn_versions is None:
        return None if turns == 1 else "an episode of several turns must give turn_versions"
    if len(turn_versions) != turns:
        return f"{len(turn_versions)} turn_versions for {turns} model turns"
    if turn_versions[0] != leased or turn_versions[-1] > latest:
        return f"turn_versions {turn_versions} must start at the lease's v{leased} and not pass v{latest}"
    return None


def accepted_groups(lease: Lease, worker_id: str, request: SubmitRequest, rewards: list[list[float]]) -> list[Group]:
    """The groups of a checked submission with the coordinator's ``rewards`` (one list per group, in
    the request's order), as the learner will train on them."""
    return [Group(slot=g.slot, example=lease.slots[g.slot], version=lease.version, worker_id=worker_id,
                  token_ids=[c.token_ids for c in g.completions], logprobs=[c.logprobs for c in g.completions],
                  rewards=group_rewards, masks=_each(g.completions, "mask", lambda c: [1] * len(c.token_ids)),
                  turn_versions=_each(g.completions, "turn_versions", lambda c: [lease.version]),
                  switches=[[(s.at, s.version) for s in c.switches or ()] for c in g.completions]
                  if any(c.switches for c in g.completions) else None,
                  turn_draws=[turn_draws(lease.draw_seed, row_key(g.slot, i), c.mask) for i, c in enumerate(g.completions)])
            for g, group_rewards in zip(request.groups, rewards, strict=True)]


def turn_draws(seed: int, row: int, mask: list[int] | None) -> list[tuple[int, int, int]]:
    """The draw key of each model turn of a completion of row ``row`` in a lease of ``seed``: its
    tokens draw on from the model tokens before it (:func:`echo2.model.episodes.run_episodes`)."""
    if mask is None:
        return [(seed, row, 0)]
    draws, before = [], 0
    for start, end, own in segments(mask):
        if own:
            draws.append((seed, row, before))
            before += end - start
    return draws


def _each(completions: list, name: str, default: Callable[[Any], list[int]]) -> list[list[int]] | None:
    """Each completion's ``name`` field, ``default(completion)`` where one leaves it out (a mask of
    ones; one turn at the lease's version); None when every completion leaves it out."""
    values = [getattr(c, name) for c in completions]
    if all(v is None for v in values):
        return None
    return [v if v is not None else default(c) for v, c in zip(values, completions)]
