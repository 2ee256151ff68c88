"""An agent run's parts, wired for ``echo2 train``: the episodes' books, the gateway and the agent pool.

``task.name=agent:module:function`` (:mod:`echo2.gateway.agents`): the coordinator leases the
agents' model calls instead of task prompts (``RunSpec.agent_calls``), serves the
OpenAI-compatible gateway beside the workers' API (:mod:`echo2.gateway.api`), and the learner's
host plays the episodes. Everything else — pacing, leases, audits, the learner — is the run's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from fastapi import FastAPI
from transformers import PreTrainedTokenizerBase

from echo2.config import Config, ConfigError
from echo2.coordinator.records import Lease
from echo2.coordinator.state import CoordinatorState
from echo2.core.sample_queue import SampleWork
from echo2.gateway.agents import AGENT_PREFIX, AgentPool, load_agent
from echo2.gateway.api import gateway_doors, gateway_router
from echo2.gateway.desk import AGENT_SOURCE, CallLimits, CallSettings, GatewayDesk
from echo2.gateway.episodes import EpisodeBook
from echo2.learner.evaluations import InlineEvaluations
from echo2.model.evaluation import EvalResult
from echo2.net.guard import Door
from echo2.protocol import RunSpec, SampleResult
from echo2.tasks import Example, load_task
from echo2.tasks.chat import ChatPrompt


def is_agent_run(config: Config) -> bool:
    return config.task.name.startswith(AGENT_PREFIX)


class AgentRun:
    """An agent run's work (:mod:`echo2.launch.work`) and its work source
    (:mod:`echo2.coordinator.sources`): the agents' calls, sampled by the fleet and answered by the
    gateway's desk, their episodes reaped and counted. Attached to the coordinator once built (the
    desk and the episodes' books are built over the coordinator's)."""

    name = AGENT_SOURCE

    def __init__(self, config: Config, run_dir: Path) -> None:
        self.config, self.run_dir = config, run_dir
        try:  # an agent that cannot be imported fails before anything starts, in one line
            self.function = load_agent(config.task.name)
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{error} (a module in the current directory needs PYTHONPATH=.)") from None
        self.task = load_task(config.agent.examples, config.task.options)
        """The examples its episodes play (``agent.examples``): their rewards are the agent's."""
        self.desk: GatewayDesk | None = None
        self.book: EpisodeBook | None = None
        self.pool: AgentPool | None = None

    def spec(self, spec: RunSpec) -> RunSpec:
        """Workers sample the agents' calls, one model turn each (the agent plays the episode)."""
        return spec.model_copy(update={"agent_calls": True, "max_turns": 1})

    def prompts(self, weights: str) -> None:
        """No task prompt is leased: the agent opens its groups itself."""
        return None

    def attach(self, state: CoordinatorState, tokenizer: PreTrainedTokenizerBase, max_context: int | None) -> None:
        """The episodes' books over ``state``'s, and the desk that serves their calls."""
        config, agent = self.config, self.config.agent
        book = self.book = EpisodeBook(state.parts, config.rollout.group_size, agent.episode_timeout_s,
                                       agent.max_claimed or 2 * agent.concurrency)
        self.desk = GatewayDesk(
            state, book, ChatPrompt(agent.chat_template or config.model.name),
            encode=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
            decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True), eos_id=tokenizer.eos_token_id,
            settings=CallSettings(config.rollout.temperature, config.rollout.max_new_tokens, max_context,
                                  agent.call_timeout_s, config.model.name),
            limits=CallLimits(agent.max_calls_per_episode, agent.max_calls_in_flight, agent.max_calls_per_episode_total))
        state.add_source(self)

    # ------------------------------------------------------------------ its work source's members (called locked)
    def results(self, worker_id: str, lease: Lease, results: list[SampleResult]) -> None:
        """The calls' checked results, to the desk that answers them."""
        self._desk().results(worker_id, lease, results)

    def refused(self, work: SampleWork, why: str) -> None:
        self._desk().refused(work, why)

    def reap(self) -> None:
        """The episodes past their deadline unrewarded, dropped with their groups."""
        if self.book is not None:
            self.book.expire()

    def report(self) -> dict[str, float]:
        """Episodes, calls and groups (:class:`~echo2.gateway.episodes.EpisodeCounts`) and the pool's figures."""
        return {**(asdict(self.book.counts) if self.book is not None else {}), **self._pool_figures()}

    def _pool_figures(self) -> dict[str, float]:
        """The pool's outcomes (``played``, ``failed``: the agent raised, ``timed_out``) and its means."""
        if self.pool is None:
            return {}
        return {**{f"agent_{name}": count for name, count in asdict(self.pool.counts).items()}, **self.pool.means()}

    def _desk(self) -> GatewayDesk:
        assert self.desk is not None, "an agent run's desk is built (attach) before the server starts"
        return self.desk

    def doors(self, run_token: str) -> dict[str, Door]:
        """The gateway's credentials, checked before a body is read (:func:`~echo2.gateway.api.gateway_doors`)."""
        return gateway_doors(self._desk(), run_token)

    def mount(self, app: FastAPI, run_token: str, base_url: Callable[[], str]) -> None:
        app.include_router(gateway_router(self._desk(), run_token, base_url))

    def start(self, url: str) -> None:
        """Start playing episodes against the gateway at ``url`` (once the workers are up)."""
        agent = self.config.agent
        self.pool = AgentPool(self.function, self._desk().book, url, concurrency=agent.concurrency,
                              episode_timeout_s=agent.episode_timeout_s, call_timeout_s=agent.call_timeout_s,
                              success_reward=agent.success_reward, episodes_file=self.run_dir / "episodes.jsonl")
        self.pool.start()

    def evaluations(self, state: CoordinatorState, examples: list[Example], run_dir: Path) -> InlineEvaluations:
        """Held-out evaluation by the agent itself: each example played once through the fleet."""

        def evaluate(version: int) -> EvalResult:
            assert self.pool is not None
            return self.pool.evaluate(examples, version, shown=self.config.eval.show)

        return InlineEvaluations(evaluate)

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()

    def close(self) -> None:
        pass
