"""An agent's model call, served by the fleet: rendered, queued as lease work, answered, recorded.

A call is sampling work in the run's books, the very path a training service's ``asample`` takes
(:mod:`echo2.core.sample_queue`): a worker holding a version at least its group's takes it in a
lease, samples it with the run's own weights (the sampler ``""``) at ``rollout.temperature`` and
submits the tokens with their log-probs; the lease's version is the call's. The agent is answered
at once; what the worker said is checked where every worker's word is, by the learner's audit of
the group, each call at its own version and on its own worker's account
(:mod:`echo2.learner.verification`), before any of it is trained.

The prompt is the conversation rendered with the model's chat template, keeping the ids the model
sampled wherever it extends a conversation this episode was answered (:mod:`.render`): no
re-tokenization of the model's own text.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from openai.types import Completion
from openai.types.chat import ChatCompletion

from echo2.coordinator.records import Lease
from echo2.coordinator.state import CoordinatorState
from echo2.core.draw_rule import request_draw
from echo2.core.sample_queue import SampleWork
from echo2.gateway.episodes import AgentEpisode, EpisodeBook
from echo2.gateway.openai_wire import (
    ChatRequest,
    CompletionRequest,
    Refused,
    chat_completion,
    reply_message,
    text_completion,
)
from echo2.gateway.render import Held, prompt_ids
from echo2.gateway.trajectory import Call
from echo2.net.guard import Tarpit
from echo2.protocol import SampleResult, leased_sample
from echo2.rollout.engines.bundles import BASE_SAMPLER
from echo2.tasks.chat import ChatPrompt

#: An agent run's calls' work source name (:mod:`echo2.coordinator.sources`).
AGENT_SOURCE = "agent"


class CallTimeout(TimeoutError):
    """No worker answered a call within ``agent.call_timeout_s``: a 504."""


@dataclass(frozen=True)
class CallSettings:
    temperature: float
    max_new_tokens: int
    max_context: int | None
    call_timeout_s: float
    model_name: str


class CallsBusy(RuntimeError):
    """Too many calls of one episode, or of the run, in flight: a 429 (``Retry-After``)."""


@dataclass(frozen=True)
class CallLimits:
    per_episode: int
    """Calls of one episode in flight at once, at most (an agent's turns are sequential; a few
    parallel tool branches are not)."""
    in_all: int
    """Calls in flight over the whole run, at most."""
    per_episode_total: int = 128
    """Calls one episode may make in all (an agent's episode takes a handful; a key holder calling
    on and on took the fleet's time from every honest episode)."""


@dataclass
class _Waiting:
    """A call queued for the fleet, until a worker's answer (or its timeout): an asyncio future of
    the event loop the call is awaited on, resolved from whichever thread hands the answer over."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future = field(init=False)

    def __post_init__(self) -> None:
        self.future = self.loop.create_future()

    def settle(self, outcome: tuple[str, int, SampleResult, int] | Refused) -> None:
        """From any thread: the worker, the lease's version, its result and its draw seed, or why the
        fleet refused it."""
        try:
            self.loop.call_soon_threadsafe(_set_once, self.future, outcome)
        except RuntimeError:  # its loop is closed: the call gave up meanwhile
            pass


def _set_once(future: asyncio.Future, outcome: object) -> None:
    if not future.done():
        future.set_result(outcome)


class GatewayDesk:
    """``encode``/``decode``: the run's tokenizer; ``eos_id``: its end-of-turn token.

    A call is awaited on the event loop, never on a thread of the server's pool: those are the
    workers' routes' (leases, submissions, heartbeats), and 100 concurrent calls of one episode,
    each holding a pool thread until a worker answered, had delayed an honest worker's heartbeat
    30 s (declared dead) and the learner to a quarter of its pace. Rendering runs off the loop
    (:func:`asyncio.to_thread`); calls in flight are capped per episode and per run
    (:class:`CallLimits`, :class:`CallsBusy`: 429), and refused calls held by their episode's count
    (:class:`~echo2.net.guard.Tarpit`)."""

    def __init__(self, state: CoordinatorState, book: EpisodeBook, chat: ChatPrompt, encode: Callable[[str], list[int]],
                 decode: Callable[[list[int]], str], eos_id: int, settings: CallSettings,
                 limits: CallLimits = CallLimits(per_episode=4, in_all=256)) -> None:
        self.state, self.book, self.template, self.encode, self.decode = state, book, chat, encode, decode
        self.eos_id, self.settings, self.limits = eos_id, settings, limits
        self._waiting: dict[str, _Waiting] = {}
        self._ids = itertools.count()
        self._in_flight: Counter[str] = Counter()
        """Calls being served, by episode id (touched on the event loop only)."""
        self.tarpit = Tarpit()
        """Holds refused calls by episode key: a flood answered a few times a second."""
        self.seconds = {"render_s": 0.0, "wait_s": 0.0, "calls": 0}
        """The gateway's own time per call (rendering, recording) apart from the wait for a worker."""

    # ------------------------------------------------------------------ the endpoints
    async def chat(self, key: str, request: ChatRequest) -> ChatCompletion:
        started = time.perf_counter()
        episode = self.book.playing(key)
        with self._admitted(episode):
            budget, stops = request.checked(self.settings.temperature, self.settings.max_new_tokens, request.budget())
            messages, tools = request.conversation(self.template.renders_tools)
            ids = await asyncio.to_thread(prompt_ids, self.template, self.encode, messages, episode.held, tools)
            call_id, (tokens, logprobs, stopped, worker_id, version, draw) = await self._sample(
                episode, ids, budget, stops, started)
        recorded = time.perf_counter()
        reply = self.decode(tokens)
        message, said = reply_message(reply)
        ended = bool(tokens) and tokens[-1] == self.eos_id
        self.book.record(episode, Call(call_id, ids, tokens, logprobs, version, draw), worker_id,
                         Held([*messages, said], ids + tokens, ended, tools))
        self._count("render_s", time.perf_counter() - recorded)
        return chat_completion(call_id, self.settings.model_name, message, stopped, len(ids), len(tokens))

    async def complete(self, key: str, request: CompletionRequest) -> Completion:
        """``/v1/completions``: the prompt text encoded as it is (no template); each call of an episode
        whose prompt extends an earlier call's whole sequence continues its segment token for token."""
        started = time.perf_counter()
        episode = self.book.playing(key)
        with self._admitted(episode):
            request.check_text()
            budget, stops = request.checked(self.settings.temperature, self.settings.max_new_tokens)
            ids = await asyncio.to_thread(self._text_prompt, episode, request.prompt)
            call_id, (tokens, logprobs, stopped, worker_id, version, draw) = await self._sample(
                episode, ids, budget, stops, started)
        recorded = time.perf_counter()
        text = self.decode(tokens)
        self.book.record(episode, Call(call_id, ids, tokens, logprobs, version, draw), worker_id,
                         Held([{"role": "text", "content": request.prompt + text}], ids + tokens, True))
        self._count("render_s", time.perf_counter() - recorded)
        return text_completion(call_id, self.settings.model_name, text, stopped, len(ids), len(tokens))

    def refusal(self, episode: AgentEpisode) -> Refused | CallsBusy | None:
        """Why one more call of ``episode`` may not be made now, within :class:`CallLimits` (its calls
        spent: :class:`Refused`; too many at once: :class:`CallsBusy`), or None. Asked at the door,
        before a body byte is read, and again when the call is admitted."""
        made = episode.trajectory.calls_made
        if made + self._in_flight[episode.episode_id] >= self.limits.per_episode_total:
            return Refused(f"episode {episode.episode_id} has made {made} calls, the most "
                           f"agent.max_calls_per_episode_total={self.limits.per_episode_total} allows")
        mine, everyone = self._in_flight[episode.episode_id], sum(self._in_flight.values())
        if mine >= self.limits.per_episode or everyone >= self.limits.in_all:
            which = (f"episode {episode.episode_id} has {mine} calls in flight (at most {self.limits.per_episode})"
                     if mine >= self.limits.per_episode else f"{everyone} calls are in flight (at most {self.limits.in_all})")
            return CallsBusy(f"too many calls at once: {which}; retry when one is answered")
        return None

    @contextmanager
    def _admitted(self, episode: AgentEpisode) -> Iterator[None]:
        """One more call of ``episode`` in flight, within :class:`CallLimits` (else :meth:`refusal`'s error)."""
        if (why := self.refusal(episode)) is not None:
            raise why
        self._in_flight[episode.episode_id] += 1
        try:
            yield
        finally:
            self._in_flight[episode.episode_id] -= 1
            if not self._in_flight[episode.episode_id]:
                del self._in_flight[episode.episode_id]

    def _text_prompt(self, episode: AgentEpisode, prompt: str) -> list[int]:
        """A text prompt's ids: the longest answered text it extends, its ids kept, the rest encoded."""
        extended = [h for h in episode.held if h.messages[0]["role"] == "text"
                    and prompt.startswith(h.messages[0]["content"]) and len(prompt) > len(h.messages[0]["content"])]
        if extended:
            longest = max(extended, key=lambda h: len(h.messages[0]["content"]))
            return longest.ids + self.encode(prompt[len(longest.messages[0]["content"]):])
        return self.encode(prompt)

    # ------------------------------------------------------------------ the fleet
    async def _sample(self, episode: AgentEpisode, ids: list[int], budget: int, stops: list[str],
                      started: float) -> tuple[str, tuple[list[int], list[float], bool, str, int, tuple[int, int]]]:
        window = self.settings.max_context
        if window is not None and len(ids) + budget > window:
            raise Refused(f"the conversation ({len(ids)} tokens) and max_tokens ({budget}) exceed the model's "
                          f"{window}-token window")
        call_id = f"call-{next(self._ids)}"
        try:
            leased = leased_sample(slot=0, sampler=BASE_SAMPLER, prompt_ids=ids, num_samples=1, max_tokens=budget,
                                   temperature=self.settings.temperature, stop_strings=stops)
        except ValueError as error:
            raise Refused(str(error)) from None
        work = SampleWork(call_id, episode.group.version, 1, leased, source=AGENT_SOURCE)
        waiting = _Waiting(asyncio.get_running_loop())
        with self.state.cond:
            self._waiting[call_id] = waiting
        self._count("render_s", time.perf_counter() - started)
        queued = time.perf_counter()
        self.state.queue_samples([work])
        try:
            outcome = await asyncio.wait_for(waiting.future, self.settings.call_timeout_s)
        except TimeoutError:
            self.state.drop_samples({call_id})
            raise CallTimeout(f"no worker answered within agent.call_timeout_s={self.settings.call_timeout_s:g}s "
                              f"(workers at work: {self._at_work()})") from None
        finally:
            with self.state.cond:
                self._waiting.pop(call_id, None)
            self._count("wait_s", time.perf_counter() - queued)
            self._count("calls", 1)
        if isinstance(outcome, Refused):
            raise outcome
        worker_id, version, result, draw_seed = outcome
        sequence = result.sequences[0]
        draw = request_draw(None, result.slot, 0, draw_seed)
        return call_id, (sequence.token_ids, sequence.logprobs, sequence.stop_reason == "stop", worker_id, version, draw)

    def _count(self, name: str, amount: float) -> None:
        with self.state.cond:  # calls are served on many threads
            self.seconds[name] += amount

    def _at_work(self) -> int:
        with self.state.cond:
            return sum(r.at_work for r in self.state.registry.records())

    def results(self, worker_id: str, lease: Lease, results: list[SampleResult]) -> None:
        """The coordinator's sink for a checked sampling lease (called under the books' lock): each
        waiting call gets its answer; a call that gave up meanwhile is let go."""
        for result in results:
            work = lease.slots[result.slot]
            waiting = self._waiting.get(work.request_id)
            if waiting is not None:
                waiting.settle((worker_id, lease.version, result, lease.draw_seed))

    def refused(self, work: SampleWork, why: str) -> None:
        """The coordinator's word that a call is a poison pill (called under the books' lock): its
        caller is answered 400 with the reason."""
        waiting = self._waiting.get(work.request_id)
        if waiting is not None:
            waiting.settle(Refused(f"the fleet could not sample this call: {why}"))
