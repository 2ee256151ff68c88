"""What an ``echo2 train`` run's fleet works on, as one object the launcher sets up, wires, starts
and stops the same way whatever it is: a task's prompts (:class:`TaskWork`), or an agent's
episodes (:class:`echo2.launch.agents.AgentRun`, ``task.name=agent:module:function``).

AReaL runs an agent as one more workflow over the same engine and staleness controller; here it
is one more kind of work over the same coordinator, learner and fleet, and the launcher never
asks which (:func:`run_work` does, once).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from fastapi import FastAPI
from transformers import PreTrainedTokenizerBase

from echo2.config import Config, ConfigError
from echo2.coordinator.scoring import Scorer, TaskPrompts, Verdicts, task_scorer
from echo2.coordinator.scoring_processes import ScoringError, ScoringProcesses
from echo2.coordinator.state import CoordinatorState
from echo2.launch.agents import AgentRun, is_agent_run
from echo2.learner.evaluations import InlineEvaluations, ProcessEvaluations
from echo2.model.episodes import observation_ids
from echo2.model.loading import load_tokenizer
from echo2.net.guard import Door
from echo2.protocol import RunSpec
from echo2.tasks import Example, Task, load_task


class RunWork(Protocol):
    """A kind of work as the launcher sees it, in the order it is called."""

    task: Task
    """Its examples: trained on (the staleness window paces them) and held out for evaluation."""

    def spec(self, spec: RunSpec) -> RunSpec:
        """What workers are told of the run, given the run's own ``spec``."""

    def prompts(self, weights: str) -> TaskPrompts | None:
        """The task's prompts, leased and scored with a tokenizer of ``weights`` (None: none are leased)."""

    def attach(self, state: CoordinatorState, tokenizer: PreTrainedTokenizerBase, max_context: int | None) -> None:
        """Its parts built over the coordinator's books (a work source of its own added to it)."""

    def doors(self, run_token: str) -> dict[str, Door] | None:
        """Credentials of routes of its own, checked before a body is read."""

    def mount(self, app: FastAPI, run_token: str, base_url: Callable[[], str]) -> None:
        """Its routes on the coordinator's server."""

    def evaluations(self, state: CoordinatorState, examples: list[Example],
                    run_dir: Path) -> InlineEvaluations | ProcessEvaluations | None:
        """Where held-out ``examples`` are evaluated (None: by the learner, in its process)."""

    def start(self, url: str) -> None:
        """The fleet is up at ``url``: begin."""

    def stop(self) -> None:
        """The run is over: make no more work (twice is once)."""

    def close(self) -> None:
        """The coordinator's server has stopped: release what serving the workers needed."""


def run_work(config: Config, run_dir: Path) -> RunWork:
    """``config``'s kind of work: an agent's episodes for ``task.name=agent:...``, else the task's prompts."""
    return AgentRun(config, run_dir) if is_agent_run(config) else TaskWork(config)


class TaskWork:
    """A task's prompts: leased to the fleet, scored by the coordinator (in processes of its own
    where ``coordinator.scoring_processes`` > 0), evaluated where ``eval.where`` says."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.task = load_task(config.task.name, config.task.options)
        self.verdicts: Verdicts | None = None

    def spec(self, spec: RunSpec) -> RunSpec:
        return spec

    def prompts(self, weights: str) -> TaskPrompts:
        self.verdicts = coordinator_verdicts(self.config, self.task)
        return TaskPrompts(reward_scorer(self.verdicts, weights),
                           self.verdicts.respond if self.task.max_turns > 1 else None)

    def attach(self, state: CoordinatorState, tokenizer: PreTrainedTokenizerBase, max_context: int | None) -> None:
        pass

    def doors(self, run_token: str) -> None:
        return None

    def mount(self, app: FastAPI, run_token: str, base_url: Callable[[], str]) -> None:
        pass

    def evaluations(self, state: CoordinatorState, examples: list[Example], run_dir: Path) -> ProcessEvaluations | None:
        """``eval.where: process`` (it loads its model while the workers start) or ``after``; None: ``learner``."""
        where = self.config.eval.where
        return ProcessEvaluations(run_dir, deferred=where == "after", before_start=state.finish) \
            if where != "learner" else None

    def start(self, url: str) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        """The scoring processes, once no submission can arrive (one closed earlier left a lease
        submitted during the shutdown unscorable)."""
        if isinstance(self.verdicts, ScoringProcesses):
            self.verdicts.close()


def coordinator_verdicts(config: Config, task: Task) -> Verdicts:
    """Where the coordinator's rewards and environment answers come from: ``task`` rebuilt in
    ``coordinator.scoring_processes`` processes, each call bounded in time; with 0, ``task`` itself
    in the coordinator's threads."""
    coordinator = config.coordinator
    if coordinator.scoring_processes == 0:
        return task
    try:
        return ScoringProcesses(config.task.name, config.task.options, coordinator.scoring_processes,
                                coordinator.scoring_timeout_s, start_timeout_s=coordinator.start_timeout_s)
    except ScoringError as error:
        raise ConfigError(f"coordinator.scoring_processes: {error}. The coordinator scores in processes of its "
                          "own, which import the task by its name: define it in an importable module (or in a "
                          "script that starts the run under `if __name__ == '__main__':`), or set "
                          "coordinator.scoring_processes=0 to score in the coordinator's threads, with no time "
                          "bound") from None


def reward_scorer(task: Verdicts, weights: str) -> Scorer:
    """How the coordinator scores submitted completions: each model turn decoded as sampling and
    evaluation read it (special tokens such as EOS dropped), inserted tokens checked against the
    environment's answers, then ``task.episode_rewards``. Its own tokenizer, as it runs in the
    coordinator's HTTP threads."""
    tokenizer = load_tokenizer(weights)
    return task_scorer(task, lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                       lambda text: observation_ids(tokenizer, text))
