"""The run's agent pool: the user's async agent function playing episodes on the trusted host.

``task.name=agent:module:function`` names ``async def function(example, client)``: it plays one
episode of ``example`` (a :class:`~echo2.tasks.Example`) with ``client``, an ``openai.AsyncOpenAI``
already pointed at its episode (base URL and key), and returns the episode's reward — a number, or
a mapping with ``reward`` and any other numbers to log (``{"reward": 1.0, "called_tool": 1}``):
each rewarded training episode is a line of ``RUN_DIR/episodes.jsonl``, and the means of those
numbers over the last :data:`WINDOW` episodes are logged with every step (``agent/mean_<name>``). Whatever it does between calls — run tools, keep a sandbox, call other
services — is its own: only its model calls go to the fleet. The pool plays
``agent.concurrency`` episodes at a time on an event loop of its own thread, each cancelled at
``agent.episode_timeout_s``; an episode whose function raises or times out is given up (its
group dropped, counted), the run goes on. An agent in another program plays the same way
through ``POST /rl/episodes`` (:mod:`.api`).

Held-out evaluation plays the task's held-out examples the same way, one episode each, sampled by
the fleet at the run's temperature from the version evaluated or a newer one, never trained.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import openai

from echo2.config.base import import_path
from echo2.gateway.episodes import AgentEpisode, EpisodeBook
from echo2.model.evaluation import EvalResult
from echo2.tasks import Example

log = logging.getLogger("echo2.gateway")

AgentFunction = Callable[[Example, openai.AsyncOpenAI], Awaitable[float | Mapping[str, float]]]

#: Rewarded training episodes whose numbers make the means logged with each step.
WINDOW = 64
#: Longest wait of a pool's player after episodes given up in a row.
MAX_BACKOFF_S = 30.0
#: ``task.name`` of an agent run: ``agent:module:function``.
AGENT_PREFIX = "agent:"


def load_agent(name: str) -> AgentFunction:
    """The async agent function ``task.name=agent:module:function`` names (a clear error otherwise)."""
    path = name.removeprefix(AGENT_PREFIX)
    function = import_path(path, f"task.name={name!r}")
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"task.name={name!r}: {path} is not an async function "
                        f"(async def agent(example, client: openai.AsyncOpenAI) -> float)")
    return function


@dataclass
class PoolCounts:
    """The agent function's outcomes: ``played``, ``failed`` (it raised), ``timed_out``."""

    played: int = 0
    failed: int = 0
    timed_out: int = 0


class AgentPool:
    """Plays ``function`` on the episodes of ``book`` through the gateway at ``base_url``."""

    def __init__(self, function: AgentFunction, book: EpisodeBook, base_url: str, *, concurrency: int,
                 episode_timeout_s: float, call_timeout_s: float, success_reward: float = 1.0,
                 episodes_file: Path | None = None) -> None:
        self.function, self.book, self.base_url = function, book, f"{base_url}/v1"
        self.success_reward, self.episodes_file = success_reward, episodes_file
        self.recent: deque[dict[str, float]] = deque(maxlen=WINDOW)
        """The numbers of the last rewarded training episodes (reward included)."""
        self.concurrency, self.episode_timeout_s, self.call_timeout_s = concurrency, episode_timeout_s, call_timeout_s
        self.counts = PoolCounts()
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="echo2-agents", daemon=True)
        self._players: list[concurrent.futures.Future] = []

    def start(self) -> None:
        self._thread.start()
        self._players = [asyncio.run_coroutine_threadsafe(self._play_training(), self._loop)
                         for _ in range(self.concurrency)]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop playing: episodes in play are cancelled after ``timeout_s`` (their groups are dropped with the run)."""
        self._stop.set()
        if not self._thread.is_alive():
            return
        concurrent.futures.wait(self._players, timeout_s)
        for player in self._players:
            player.cancel()
        concurrent.futures.wait(self._players, 1.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()

    async def _play_training(self) -> None:
        """Play episode after episode; after one given up, wait before the next (doubling, up to
        :data:`MAX_BACKOFF_S`): an agent that fails at once would otherwise churn through examples."""
        failures = 0
        while not self._stop.is_set():
            episode = await asyncio.to_thread(self.book.claim, 1.0, self._stop)
            if episode is None:
                continue
            outcome = await self._play(episode)
            if outcome is not None:
                self._keep(episode, outcome)  # before its reward, which may let its group's calls go
                self.book.reward(episode.episode_id, outcome["reward"])
                failures = 0
            else:
                failures += 1
                await asyncio.sleep(min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 1)))

    def _keep(self, episode: AgentEpisode, outcome: dict[str, float]) -> None:
        self.recent.append(outcome)
        if self.episodes_file is not None:
            line = {"episode": episode.episode_id, "version": episode.group.version, "prompt": episode.example.prompt,
                    "calls": len(episode.held), "time": time.time(), **outcome}
            with self.episodes_file.open("a") as out:
                out.write(json.dumps(line) + "\n")

    def means(self) -> dict[str, float]:
        """Each number's mean over the last :data:`WINDOW` rewarded training episodes."""
        recent = list(self.recent)
        names = dict.fromkeys(name for outcome in recent for name in outcome)
        return {f"mean_{name}": sum(o.get(name, 0.0) for o in recent) / len(recent) for name in names}

    async def _play(self, episode: AgentEpisode) -> dict[str, float] | None:
        """``episode`` played: its reward and numbers, or None (given up: the function raised or ran
        out of time, or returned no reward)."""
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=episode.key, timeout=self.call_timeout_s + 10.0,
                                    max_retries=0)
        try:
            returned = await asyncio.wait_for(self.function(episode.example, client), self.episode_timeout_s)
            outcome = outcome_of(returned)
            self.counts.played += 1
            return outcome
        except TimeoutError:
            self.counts.timed_out += 1
            self.book.give_up(episode.episode_id, f"its agent did not finish within agent.episode_timeout_s="
                                                  f"{self.episode_timeout_s:g}s")
        except Exception as error:  # noqa: BLE001 - the user's agent failing ends its episode, not the run
            self.counts.failed += 1
            log.warning("agent episode %s failed: %s: %s", episode.episode_id, type(error).__name__, error)
            self.book.give_up(episode.episode_id, f"its agent raised {type(error).__name__}")
        finally:
            await client.close()
        return None

    # ------------------------------------------------------------------ held-out evaluation
    def evaluate(self, examples: list[Example], version: int, shown: int = 3) -> EvalResult:
        """Play each held-out example once at ``version`` or newer (the learner waits)."""
        timeout_s = self.episode_timeout_s * (len(examples) / self.concurrency + 1)
        return asyncio.run_coroutine_threadsafe(self._evaluate(examples, version, shown), self._loop).result(timeout_s)

    async def _evaluate(self, examples: list[Example], version: int, shown: int) -> EvalResult:
        episodes = self.book.evaluation(examples, version)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(episode: AgentEpisode) -> float:
            async with limit:
                outcome = await self._play(episode)
            return 0.0 if outcome is None else outcome["reward"]

        started = time.perf_counter()
        rewards = await asyncio.gather(*(one(e) for e in episodes))
        calls = [len(e.held) for e in episodes]
        self.book.finish_evaluation(episodes)
        solved = [r >= self.success_reward for r in rewards]
        log.info("agent evaluation of v%d: %d episodes in %.1fs", version, len(episodes), time.perf_counter() - started)
        return EvalResult(accuracy=sum(solved) / max(len(solved), 1), sampled_reward=sum(rewards) / max(len(rewards), 1),
                          examples=[(e.example.prompt, _transcript(e), r) for e, r in zip(episodes[:shown], rewards)],
                          turns=sum(calls) / max(len(calls), 1))


def outcome_of(returned: object) -> dict[str, float]:
    """An agent function's return: a reward, or a mapping with ``reward`` and other numbers."""
    if isinstance(returned, Mapping):
        if "reward" not in returned:
            raise TypeError(f"the agent returned {sorted(returned)} without a 'reward'")
        values = {str(name): float(value) for name, value in returned.items()}
    else:
        values = {"reward": float(returned)}  # a TypeError names what came back
    if not all(math.isfinite(v) for v in values.values()):
        raise ValueError(f"the agent returned a number that is not finite: {values}")
    return values


def _transcript(episode: AgentEpisode) -> str:
    """The episode's last answered conversation, as text (what the log shows)."""
    if not episode.held:
        return "(no model call)"
    return " | ".join(f"{m['role']}: {m['content']}" for m in episode.held[-1].messages[1:])

