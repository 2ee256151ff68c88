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

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from openai.types import Completion
from openai.types.chat import ChatCompletion

from echo2.coordinator.records import Lease
from echo2.coordinator.state import CoordinatorState
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
from echo2.protocol import SampleResult, leased_sample
from echo2.rollout.engines.bundles import BASE_SAMPLER
from echo2.tasks.chat import ChatPrompt


class CallTimeout(TimeoutError):
    """No worker answered a call within ``agent.call_timeout_s``: a 504."""


@dataclass(frozen=True)
class CallSettings:
    temperature: float
    max_new_tokens: int
    max_context: int | None
    call_timeout_s: float
    model_name: str


@dataclass
class _Waiting:
    """A call queued for the fleet, until a worker's answer (or its timeout)."""

    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[str, int, SampleResult] | None = None
    """The worker, the lease's version and its result."""
    refused: str | None = None
    """Why the fleet refused the call for good (its leases failed on two workers)."""


class GatewayDesk:
    """``encode``/``decode``: the run's tokenizer; ``eos_id``: its end-of-turn token."""

    def __init__(self, state: CoordinatorState, book: EpisodeBook, chat: ChatPrompt, encode: Callable[[str], list[int]],
                 decode: Callable[[list[int]], str], eos_id: int, settings: CallSettings) -> None:
        self.state, self.book, self.template, self.encode, self.decode = state, book, chat, encode, decode
        self.eos_id, self.settings = eos_id, settings
        self._waiting: dict[str, _Waiting] = {}
        self._ids = itertools.count()
        self.seconds = {"render_s": 0.0, "wait_s": 0.0, "calls": 0}
        """The gateway's own time per call (rendering, recording) apart from the wait for a worker."""

    # ------------------------------------------------------------------ the endpoints
    def chat(self, key: str, request: ChatRequest) -> ChatCompletion:
        started = time.perf_counter()
        episode = self.book.playing(key)
        budget, stops = request.checked(self.settings.temperature, self.settings.max_new_tokens, request.budget())
        messages, tools = request.conversation(self.template.renders_tools)
        ids = prompt_ids(self.template, self.encode, messages, episode.held, tools)
        call_id, (tokens, logprobs, stopped, worker_id, version) = self._sample(episode, ids, budget, stops, started)
        recorded = time.perf_counter()
        reply = self.decode(tokens)
        message, said = reply_message(reply)
        ended = bool(tokens) and tokens[-1] == self.eos_id
        self.book.record(episode, Call(call_id, ids, tokens, logprobs, version), worker_id,
                         Held([*messages, said], ids + tokens, ended, tools))
        self._count("render_s", time.perf_counter() - recorded)
        return chat_completion(call_id, self.settings.model_name, message, stopped, len(ids), len(tokens))

    def complete(self, key: str, request: CompletionRequest) -> Completion:
        """``/v1/completions``: the prompt text encoded as it is (no template); each call of an episode
        whose prompt extends an earlier call's whole sequence continues its segment token for token."""
        started = time.perf_counter()
        episode = self.book.playing(key)
        request.check_text()
        budget, stops = request.checked(self.settings.temperature, self.settings.max_new_tokens)
        ids = self._text_prompt(episode, request.prompt)
        call_id, (tokens, logprobs, stopped, worker_id, version) = self._sample(episode, ids, budget, stops, started)
        recorded = time.perf_counter()
        text = self.decode(tokens)
        self.book.record(episode, Call(call_id, ids, tokens, logprobs, version), worker_id,
                         Held([{"role": "text", "content": request.prompt + text}], ids + tokens, True))
        self._count("render_s", time.perf_counter() - recorded)
        return text_completion(call_id, self.settings.model_name, text, stopped, len(ids), len(tokens))

    def _text_prompt(self, episode: AgentEpisode, prompt: str) -> list[int]:
        """A text prompt's ids: the longest answered text it extends, its ids kept, the rest encoded."""
        extended = [h for h in episode.held if h.messages[0]["role"] == "text"
                    and prompt.startswith(h.messages[0]["content"]) and len(prompt) > len(h.messages[0]["content"])]
        if extended:
            longest = max(extended, key=lambda h: len(h.messages[0]["content"]))
            return longest.ids + self.encode(prompt[len(longest.messages[0]["content"]):])
        return self.encode(prompt)

    # ------------------------------------------------------------------ the fleet
    def _sample(self, episode: AgentEpisode, ids: list[int], budget: int, stops: list[str],
                started: float) -> tuple[str, tuple[list[int], list[float], bool, str, int]]:
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
        work = SampleWork(call_id, episode.group.version, 1, leased)
        waiting = _Waiting()
        with self.state.cond:
            self._waiting[call_id] = waiting
        self._count("render_s", time.perf_counter() - started)
        queued = time.perf_counter()
        self.state.queue_samples([work])
        try:
            if not waiting.done.wait(self.settings.call_timeout_s):
                self.state.drop_samples({call_id})
                raise CallTimeout(f"no worker answered within agent.call_timeout_s={self.settings.call_timeout_s:g}s "
                                  f"(workers at work: {self._at_work()})")
        finally:
            with self.state.cond:
                self._waiting.pop(call_id, None)
            self._count("wait_s", time.perf_counter() - queued)
            self._count("calls", 1)
        if waiting.refused is not None:
            raise Refused(f"the fleet could not sample this call: {waiting.refused}")
        assert waiting.answer is not None
        worker_id, version, result = waiting.answer
        sequence = result.sequences[0]
        return call_id, (sequence.token_ids, sequence.logprobs, sequence.stop_reason == "stop", worker_id, version)

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
            if waiting is not None and not waiting.done.is_set():
                waiting.answer = (worker_id, lease.version, result)
                waiting.done.set()

    def refused(self, work: SampleWork, why: str) -> None:
        """The coordinator's word that a call is a poison pill (called under the books' lock): its
        caller is answered 400 with the reason."""
        waiting = self._waiting.get(work.request_id)
        if waiting is not None and not waiting.done.is_set():
            waiting.refused = why
            waiting.done.set()
