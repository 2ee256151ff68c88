"""One lease's generation: G episodes per leased prompt, or the completions each sampling request
asks for, sampled by the worker's engine through one path (:meth:`LeaseGenerator._play`, one
:meth:`~echo2.rollout.engines.Engine.sample` call per turn), gathered into the submission (tokens
and behaviour log-probs; no reward: the coordinator scores).

A single-turn task samples once per row; a multi-turn one plays turns, the coordinator's
environment answering between them (:mod:`echo2.model.episodes`), newer weights swapped in between
turns when the run allows it (async). A single-turn task's lease is answered group by group: each
group goes out (``post``) the moment its G rows are done while the lease's other rows still decode,
the last with the lease's final submission (ECHO-2's workers decode as inference engines do; a
lease no longer waits for its longest row to deliver its first group). Every token is drawn from the lease's ``draw_seed`` by the
verifiable rule (:mod:`echo2.model.draws`): completion ``i`` of slot ``s`` is row ``row_key(s, i)``
(a sampling request's own ``seed``, when it gave one, keys its rows ``0..n-1`` instead, so that a
client's seed gives the same completions in any lease).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from echo2.core.draw_rule import request_draw, row_key
from echo2.model.draws import Draws
from echo2.model.episodes import Episode, Respond, observation_ids, run_episodes
from echo2.model.sampling import RowFinished, WeightUpdates, stop_length
from echo2.protocol import (
    Completion,
    GroupResult,
    LeasedSample,
    LeaseResponse,
    RespondItem,
    RespondRequest,
    RunSpec,
    SampledSequence,
    SampleResult,
    SubmitRequest,
    Switch,
)
from echo2.rollout.client import CoordinatorClient
from echo2.rollout.engines import SamplingParams
from echo2.rollout.engines.bundles import BASE_SAMPLER


@dataclass
class LeaseGenerator:
    spec: RunSpec
    engine: Any
    """The worker's engine (:mod:`echo2.rollout.engines`)."""
    tokenizer: Any
    client: CoordinatorClient
    stop: threading.Event
    throughput_factor: float = 1.0
    """Emulate a device this much as fast as this core (1: as fast)."""
    longest_prompt: int | None = None
    """Tokens of the longest prompt generated so far (None before the first lease)."""

    def lease_groups(self) -> int:
        """Groups to ask for in the next lease: ``spec.groups_per_lease``, or, sized to the device,
        as many as its free memory holds now (the first lease one group: its prompts size the next)."""
        spec = self.spec
        if not spec.size_leases_to_device:
            return spec.groups_per_lease
        if self.longest_prompt is None:
            return 1
        context = self.longest_prompt + spec.max_turns * spec.max_new_tokens
        if spec.max_turns > 1 and (window := self.engine.max_context):
            context = window  # the environment's answers between turns are unknown: the whole window
        return self.engine.groups_that_fit(context, spec.groups_per_lease)

    def generate(self, lease: LeaseResponse, version: Callable[[], int], between_turns: Callable[[], None] | None,
                 post: Callable[[SubmitRequest], None] | None = None,
                 updates: WeightUpdates | None = None) -> tuple[SubmitRequest, float]:
        """The final submission of ``lease`` (events left for the caller to add) and the seconds the
        lease took; ``version``: the weights' version now; ``between_turns``: swaps newer weights in;
        ``post``: hands over a part (groups done while the lease's other rows still decode);
        ``updates``: a task's rows take newer weights between decoding steps. Each part's
        ``generate_seconds`` is the time since the part before it."""
        clock, cpu = time.perf_counter(), time.thread_time()
        if lease.draw_seed is None:
            raise ValueError(f"lease {lease.lease_id} carries no draw_seed: this coordinator predates verifiable draws")
        assert lease.lease_id is not None and lease.version is not None
        lease_id, lease_version, sent = lease.lease_id, lease.version, clock

        def part(groups: list[GroupResult]) -> None:
            nonlocal sent
            now = self._device_time(clock, cpu)
            assert post is not None
            post(SubmitRequest(lease_id=lease_id, version=lease_version, generate_seconds=now - sent, groups=groups))
            sent = now

        steps = (PacedSteps(lambda: self._device_time(clock, cpu), updates, version)
                 if updates is not None or self.throughput_factor < 1 else None)
        work = ({"samples": self._serve(lease.samples, lease.draw_seed, version)} if lease.samples
                else {"groups": self._groups(lease, version, between_turns, part if post is not None else None,
                                             steps)})
        ended = self._device_time(clock, cpu)
        return SubmitRequest(lease_id=lease_id, version=lease_version, generate_seconds=ended - sent, **work), ended - clock

    def _device_time(self, clock: float, cpu: float) -> float:
        """``time.perf_counter()`` now, on the device emulated: one ``throughput_factor`` times as
        fast as this core takes the compute used since ``clock`` (this thread's CPU time since
        ``cpu``, which other processes on the core do not inflate) / factor, so this waits that out
        (between decoding steps too: a slower device's tokens, and so the versions that arrive
        while it decodes, come at its own pace)."""
        if self.throughput_factor < 1:
            self.stop.wait(max(0.0, (time.thread_time() - cpu) / self.throughput_factor - (time.perf_counter() - clock)))
        return time.perf_counter()

    def _groups(self, lease: LeaseResponse, version: Callable[[], int], between_turns: Callable[[], None] | None,
                part: Callable[[list[GroupResult]], None] | None, updates: WeightUpdates | None) -> list[GroupResult]:
        """A task's prompts: G episodes per prompt, each turn of all of them one engine call; the
        groups not handed to ``part`` as they finished (single-turn only), the last among them."""
        group_size, spec, tokenizer = self.spec.group_size, self.spec, self.tokenizer
        slots = [p.slot for p in lease.prompts for _ in range(group_size)]
        prompt_ids = [tokenizer(p.prompt)["input_ids"] for p in lease.prompts for _ in range(group_size)]
        self.longest_prompt = max([self.longest_prompt or 0, *map(len, prompt_ids)])

        def respond(rows: list[int], replies: list[list[str]]) -> list[str | None]:
            items = [RespondItem(slot=slots[row], replies=said) for row, said in zip(rows, replies)]
            return self.client.respond(RespondRequest(lease_id=lease.lease_id, items=items)).observations

        assert lease.draw_seed is not None
        draws = Draws([(lease.draw_seed, row_key(slot, index % group_size)) for index, slot in enumerate(slots)])
        stream = GroupStream(group_size, [p.slot for p in lease.prompts], part) if part and spec.max_turns == 1 else None
        episodes = self._play(BASE_SAMPLER, SamplingParams.of_run(spec, tokenizer.eos_token_id),
                              prompt_ids, draws, version, max_turns=spec.max_turns, respond=respond,
                              between_turns=between_turns, finished=stream.row_done if stream else None,
                              updates=updates)
        multi_turn = spec.max_turns > 1
        return [GroupResult(slot=prompt.slot, completions=[
            completion_of(e, multi_turn) for e in episodes[index * group_size : (index + 1) * group_size]
        ]) for index, prompt in enumerate(lease.prompts) if not (stream and stream.posted(index))]

    def _serve(self, requests: list[LeasedSample], draw_seed: int, version: Callable[[], int]) -> list[SampleResult]:
        """Sampling requests (a training service's clients', an agent's calls), in the lease's order:
        their completions cut at their stops, and each prompt's log-probs when asked for.

        Requests that sample alike (same sampler, token budget, temperature and stops, no seed) are
        generated as one batch: a client's group often arrives as many one-sample requests (the
        cookbook's loop samples every environment of a group on its own), and one batch of them
        costs a fraction of their one-at-a-time sum. A seeded request is generated alone, so its
        seed gives the same completions whatever else the lease holds."""
        batches: dict[tuple, list[LeasedSample]] = {}
        for request in requests:
            alike = (request.sampler, request.max_tokens, request.temperature,
                     None if request.stop_ids is None else tuple(request.stop_ids), tuple(request.stop_strings),
                     None if request.seed is None else ("seeded", request.slot))
            batches.setdefault(alike, []).append(request)
        results = {}
        for batch in batches.values():
            results.update(zip((r.slot for r in batch), self._serve_alike(batch, draw_seed, version)))
        return [results[request.slot] for request in requests]

    def _serve_alike(self, batch: list[LeasedSample], draw_seed: int, version: Callable[[], int]) -> list[SampleResult]:
        first = batch[0]
        eos = self.tokenizer.eos_token_id
        stops = {eos} if first.stop_ids is None else set(first.stop_ids)
        draws = Draws([request_draw(r.seed, r.slot, i, draw_seed) for r in batch for i in range(r.num_samples)])
        params = SamplingParams(first.max_tokens, first.temperature, eos if first.stop_ids is None else -1)
        episodes = iter(self._play(first.sampler, params, [r.prompt_ids for r in batch for _ in range(r.num_samples)],
                                   draws, version))
        results = []
        for request in batch:
            sequences = []
            for episode in (next(episodes) for _ in range(request.num_samples)):
                tokens, logprobs = episode.token_ids, episode.logprobs
                kept = stop_length(tokens, stops, request.stop_strings, self.tokenizer.decode)
                end = len(tokens) if kept is None else kept
                sequences.append(SampledSequence(token_ids=tokens[:end], logprobs=logprobs[:end],
                                                 stop_reason="length" if kept is None else "stop"))
            prompt = (self.engine.prompt_logprobs(request.sampler, request.prompt_ids, request.temperature)
                      if request.prompt_logprobs else None)
            results.append(SampleResult(slot=request.slot, sequences=sequences, prompt_logprobs=prompt))
        return results

    def _play(self, sampler: str, params: SamplingParams, prompt_ids: list[list[int]], draws: Draws,
              version: Callable[[], int], *, max_turns: int = 1, respond: Respond | None = None,
              between_turns: Callable[[], None] | None = None, finished: RowFinished | None = None,
              updates: WeightUpdates | None = None) -> list[Episode]:
        """The one way a worker samples: one episode per row of ``prompt_ids`` by ``sampler``, each
        turn one :meth:`~echo2.rollout.engines.Engine.sample` call (a request, or a single-turn
        task: one turn, ``finished`` told each row as it ends; a multi-turn task: the coordinator's
        environment answering (``respond``) between turns, newer weights swapped in by ``between_turns``)."""
        tokenizer, window = self.tokenizer, self.engine.max_context  # a next turn must fit whole in the window
        return run_episodes(prompt_ids, sample=lambda rows, turn_draws: self.engine.sample(sampler, rows, params,
                                                                                            turn_draws, finished, updates),
                            draws=draws, respond=respond or _no_environment,
                            encode=lambda text: observation_ids(tokenizer, text),
                            decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                            max_turns=max_turns, version=version, between_turns=between_turns,
                            max_context=window - params.max_new_tokens if window else None, eos_id=params.eos_id)


@dataclass
class PacedSteps:
    """What a task's lease does between two decoding steps (:class:`~echo2.model.sampling.WeightUpdates`):
    keeps an emulated device's pace (``pace``), and with in-flight updates (``updates``) applies a
    newer version; ``version``: the weights' version otherwise."""

    pace: Callable[[], float]
    updates: WeightUpdates | None
    version: Callable[[], int]

    def held(self) -> int:
        return self.updates.held() if self.updates is not None else self.version()

    def between_steps(self) -> int:
        self.pace()
        return self.updates.between_steps() if self.updates is not None else self.version()


def episode_of(token_ids: list[int], logprobs: list[float], versions: list[int] | None) -> Episode:
    """A single-turn row as the episode it is (its versions: where an in-flight update took over)."""
    episode = Episode()
    if versions:
        episode.turn_versions.append(versions[0])
    episode.add(list(token_ids), list(logprobs), versions)
    return episode


def completion_of(episode: Episode, multi_turn: bool = False) -> Completion:
    """What a submission says of an episode: its tokens and behaviour log-probs, its mask and turn
    versions when it had several turns, the switches of an in-flight update when there were any."""
    return Completion(token_ids=episode.token_ids, logprobs=episode.logprobs,
                      mask=episode.mask if 0 in episode.mask else None,
                      turn_versions=episode.turn_versions if multi_turn else None,
                      switches=[Switch(at=at, version=version) for at, version in episode.switches] or None)


class GroupStream:
    """A single-turn lease's rows as they end (``row_done``, an engine's ``finished``): a group
    whose G rows are all done goes to ``part`` at once, unless it is the lease's last, which the
    final submission carries (so that one is never empty)."""

    def __init__(self, group_size: int, slots: list[int], part: Callable[[list[GroupResult]], None]) -> None:
        self.group_size, self.slots, self.part = group_size, slots, part
        self.rows: dict[int, dict[int, Completion]] = {}
        self._posted: set[int] = set()

    def row_done(self, row: int, token_ids: list[int], logprobs: list[float], versions: list[int] | None) -> None:
        index, member = divmod(row, self.group_size)
        done = self.rows.setdefault(index, {})
        done[member] = completion_of(episode_of(token_ids, logprobs, versions))
        if len(done) == self.group_size and len(self._posted) + 1 < len(self.slots):
            self._posted.add(index)
            self.part([GroupResult(slot=self.slots[index], completions=[done[m] for m in range(self.group_size)])])

    def posted(self, index: int) -> bool:
        """Whether group ``index`` went out as a part."""
        return index in self._posted


def _no_environment(rows: list[int], replies: list[list[str]]) -> list[str | None]:
    raise AssertionError("a single-turn sample has no environment to answer it")
