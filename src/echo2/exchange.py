"""What the learner and the coordinator hand each other: the records both sides import.

The coordinator fills :class:`Group` from workers' submissions and the learner trains on it;
:class:`RunStats` is the coordinator's answer when the learner asks how the run is going. Neither
side reaches into the other's modules: the learner sees the coordinator only through the five
methods named in :class:`RolloutSource`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from echo2.model.episodes import segments, token_versions
from echo2.tasks.base import Example

if TYPE_CHECKING:
    from echo2.protocol import VersionInfo


@dataclass
class Group:
    """One prompt's G completions, as accepted from a worker: its tokens and behaviour log-probs,
    and the rewards the coordinator computed for them (workers report none)."""

    slot: int
    example: Example
    version: int
    worker_id: str
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    rewards: list[float]
    masks: list[list[int]] | None = None
    """Episodes: per completion, 1 at the model's tokens and 0 at those the environment inserted
    (None: every token is the model's)."""
    turn_versions: list[list[int]] | None = None
    """Episodes: per completion, the version that sampled each model turn (None: all at ``version``)."""
    switches: list[list[tuple[int, int]]] | None = None
    """In-flight updates: per completion, (token index, version) where a newer version took over
    within a turn (:func:`echo2.model.episodes.token_versions`); None: none did."""
    prompt_ids: list[list[int]] | None = None
    """Agent episodes (:mod:`echo2.gateway`): per completion, the ids its segment began with (None:
    the example's prompt, as the learner's tokenizer encodes it)."""
    episodes: list[int] | None = None
    """Agent episodes: per completion, which of the group's ``rewards`` it earned (an episode whose
    history the agent rewrote is trained as one completion per segment); None: completion i is episode i."""
    turn_workers: list[list[str]] | None = None
    """Agent episodes: per completion, the worker that sampled each model turn (None: ``worker_id``
    sampled them all). An agent's calls go to whichever worker leases them first."""
    turn_draws: list[list[tuple[int, int, int]]] | None = None
    """Per completion, per model turn: the draw key (seed, row) it was sampled from and the position
    of its first token (:mod:`echo2.core.draw_rule`), what the audit replays; None: not recorded."""

    def workers(self) -> list[str]:
        """Every worker that sampled a turn of this group (each once): those its audit answers for."""
        if self.turn_workers is None:
            return [self.worker_id]
        return list(dict.fromkeys(w for turns in self.turn_workers for w in turns))

    def prompt_rows(self, encode: Callable[[str], list[int]]) -> list[list[int]]:
        """Each completion's prompt ids (``encode``: the learner's tokenizer, for the example's prompt)."""
        if self.prompt_ids is not None:
            return self.prompt_ids
        return [encode(self.example.prompt)] * len(self.token_ids)

    def episode_rows(self) -> list[int]:
        """Per completion, the index of its episode's reward."""
        return self.episodes if self.episodes is not None else list(range(len(self.token_ids)))

    def model_mask(self, index: int) -> list[int]:
        """Completion ``index``: 1 at the tokens the model sampled (the ones trained and audited)."""
        return self.masks[index] if self.masks is not None else [1] * len(self.token_ids[index])

    def versions(self) -> list[int]:
        """Every version that sampled tokens of this group, oldest first (``[version]`` for one turn
        at one version)."""
        turns = {v for turns in self.turn_versions for v in turns} if self.turn_versions is not None else {self.version}
        return sorted(turns | {v for switches in self.switches or () for _, v in switches})

    def token_versions(self, index: int) -> list[int | None]:
        """Completion ``index``: the version that sampled each token (None at inserted ones)."""
        mask = self.model_mask(index)
        turns = sum(own for _, _, own in segments(mask))
        turn_versions = self.turn_versions[index] if self.turn_versions is not None else [self.version] * turns
        switches = self.switches[index] if self.switches is not None else []
        return token_versions(len(mask), mask, turn_versions, switches)

    def mask_at(self, index: int, version: int, worker_id: str | None = None) -> list[int]:
        """Completion ``index``: 1 at the model's tokens that ``version`` sampled (and ``worker_id``,
        when given): its turns at that version, less what a newer version took over mid-turn."""
        at = [1 if token_version == version else 0 for token_version in self.token_versions(index)]
        own = [(start, end) for start, end, value in segments(self.model_mask(index)) if value]
        workers = self.turn_workers[index] if self.turn_workers is not None else [self.worker_id] * len(own)
        for (start, end), worker in zip(own, workers, strict=True):
            if worker_id not in (None, worker):
                at[start:end] = [0] * (end - start)
        return at


@dataclass(frozen=True)
class WorkerStats:
    """What the learner reports about one worker."""

    name: str
    alive: bool
    active: bool
    throughput: float | None
    """Measured rollouts/s (moving average; None until its first lease is submitted)."""
    samples: int
    tokens: int
    generate_seconds: float
    fetches: int
    last_fetch_seconds: float
    delta_fetches: int = 0
    """Of ``fetches``, those that rebuilt the version from its delta."""


@dataclass(frozen=True)
class RunStats:
    """A consistent snapshot of the coordinator's counters (taken under its lock)."""

    groups_dropped_stale: int
    leases_expired: int
    workers_registered: int
    activation_need: float | None
    """Rollouts/s cost-aware activation provisions for (None until the first re-plan)."""
    costs: dict[str, float]
    workers: list[WorkerStats] = field(default_factory=list)
    reward_seconds: float = 0.0
    """Time the coordinator spent scoring submitted completions with the task's verifier (so far)."""
    disseminated: list[float] = field(default_factory=list)
    """Seconds from publish to the last live worker holding it, of each version that finished
    spreading since the previous report."""
    sections: dict[str, dict[str, float]] = field(default_factory=dict)
    """More figures by section (an agent run's episodes: ``agent``), logged as ``section/name``."""

    def metrics(self) -> dict[str, float]:
        """What the learner logs of this snapshot with each step: counters, activation, costs,
        dissemination and each worker's rates."""
        records = self.workers
        values: dict[str, float] = {"groups_dropped_stale": self.groups_dropped_stale,
                                    "leases_expired": self.leases_expired, **self.costs,
                                    "reward_seconds": self.reward_seconds,
                                    "workers_alive": sum(r.alive for r in records),
                                    "workers_active": sum(r.alive and r.active for r in records)}
        if self.activation_need is not None:
            values["activation_need_rollouts_per_s"] = self.activation_need
        if self.disseminated:  # publish -> last live worker loaded, of versions that finished spreading
            values["dissemination_s"] = sum(self.disseminated) / len(self.disseminated)
            values["dissemination_max_s"] = max(self.disseminated)
        for section, counts in self.sections.items():
            values.update({f"{section}/{name}": count for name, count in counts.items()})
        for record in records:
            if record.throughput is not None:
                values[f"worker/{record.name}/measured_rollouts_per_s"] = record.throughput
            values[f"worker/{record.name}/active"] = float(record.alive and record.active)
            if record.generate_seconds > 0:
                values[f"worker/{record.name}/samples_per_s"] = record.samples / record.generate_seconds
                values[f"worker/{record.name}/tokens_per_s"] = record.tokens / record.generate_seconds
            if record.fetches:
                values[f"worker/{record.name}/fetch_latency_s"] = record.last_fetch_seconds
            if record.delta_fetches:
                values[f"worker/{record.name}/delta_fetches"] = record.delta_fetches
        return values


GiveBack = Literal["filtered", "unauditable", "suspect"]
"""Why the learner gives taken groups back untrained (see :meth:`RolloutSource.give_back`)."""


class NoBatch(TimeoutError):
    """No batch within the time asked for; ``why`` is what the coordinator says the learner is
    waiting on, once the wait is long enough to be news (None before)."""

    def __init__(self, message: str, why: str | None) -> None:
        super().__init__(message)
        self.why = why


class RolloutSource(Protocol):
    """The coordinator as the learner sees it. The coordinator keeps the run's clock itself: a step
    is timed from :meth:`take_batch` to :meth:`publish`, disseminations from the workers' reports,
    and activation re-planned from both (:class:`echo2.core.run_clock.RunClock`)."""

    def take_batch(self, step: int, timeout_s: float, count: int | None = None) -> list[Group]:
        """``count`` groups fresh for ``step``, or :class:`NoBatch` after ``timeout_s``."""

    def give_back(self, groups: list[Group], reason: GiveBack, why: str = "", worker_id: str | None = None) -> None:
        """Taken groups the learner does not train on, and why (``suspect``: ``worker_id`` lied)."""

    def publish(self, info: VersionInfo) -> None:
        """Announce a version the publisher serves now (its number, hash, size and delta)."""

    def stats(self, learner_price_per_hour: float, wall_s: float, settle_s: float = 0.0) -> RunStats:
        """How the run is going (``settle_s``: wait for the versions still spreading)."""

    def resume_snapshot(self) -> dict[str, Any]:
        """The coordinator's books as plain data, saved in the learner's checkpoint."""
