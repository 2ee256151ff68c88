"""Agent episodes as the run's books see them: G episodes of one example make a group.

The trusted side (the agent pool of ``echo2 train``, or any program holding the run token) opens
episodes with ``POST /rl/episodes``; each is handed a key its ``openai`` client presents, and the
example it is to play. Episodes are opened group by group: the first episode of a group takes a
slot of the pacing window (:class:`echo2.core.pacing.PacingLedger`, the window task prompts are
leased from: the run's bounded staleness S holds for agents too), the next G - 1 join it. An
episode ends when its owner sets its reward (``POST /rl/episodes/{id}/reward``); once all G are
rewarded, their calls (:mod:`.trajectory`: one training sequence per segment, retried turns left
out) become one :class:`~echo2.exchange.Group` in the learner's buffer, tagged with the oldest
version that sampled a turn of it.

An episode not rewarded within ``agent.episode_timeout_s`` of its opening is dropped and counted,
and its group with it (a group is G rewarded episodes: the advantages are relative to the group's
mean), the example going back to the queue. Rewards are the owner's word: workers only sample,
so the environment may keep state (a sandbox, a browser) across an episode's calls.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from echo2.coordinator.books import CoordinatorBooks
from echo2.exchange import Group
from echo2.gateway.render import Held
from echo2.gateway.trajectory import Call, Trajectory
from echo2.tasks import Example

log = logging.getLogger("echo2.gateway")

#: Seconds an ended episode's id and key still answer (a retried reward is applied once, a late
#: call is told the episode is over), before both are forgotten.
REMEMBER_S = 600.0


class EpisodeGone(LookupError):
    """The episode is unknown, or over (rewarded, dropped): a 410 naming which."""


@dataclass(eq=False)
class AgentEpisode:
    episode_id: str
    key: str
    """What its ``openai`` client presents (``Authorization: Bearer``): never logged."""
    group: OpenGroup
    index: int
    deadline: float
    trajectory: Trajectory = field(default_factory=Trajectory)
    held: list[Held] = field(default_factory=list)
    """Every conversation answered, with the ids it ended on (:mod:`.render`)."""
    workers: dict[str, str] = field(default_factory=dict)
    """Call id -> the worker that sampled it."""
    claimed: bool = False
    reward: float | None = None
    over: str | None = None
    """Why the episode takes no more calls: ``rewarded`` or ``dropped``."""

    @property
    def example(self) -> Example:
        return self.group.example


@dataclass
class EpisodeCounts:
    """What the run's agent episodes came to (typed: a misspelt name fails, where a string key made a new zero)."""

    episodes_opened: int = 0
    episodes_rewarded: int = 0
    episodes_dropped: int = 0
    groups_admitted: int = 0
    groups_dropped: int = 0
    calls: int = 0
    calls_abandoned: int = 0
    """Calls a retried turn replaced: served, never trained."""
    tokens_sampled: int = 0
    """Completion tokens of every call recorded."""
    segments_trained: int = 0


@dataclass(eq=False)
class OpenGroup:
    slot: int | None
    """Its slot in the pacing window (None: a held-out evaluation's episodes, never trained)."""
    example: Example
    version: int
    """The learner's version when it opened: every call is sampled at this version or a newer one."""
    episodes: list[AgentEpisode] = field(default_factory=list)


class EpisodeBook:
    """The run's agent episodes, under the books' lock (``parts.cond``)."""

    def __init__(self, parts: CoordinatorBooks, group_size: int, episode_timeout_s: float,
                 max_claimed: int | None = None) -> None:
        self.parts, self.group_size, self.episode_timeout_s = parts, group_size, episode_timeout_s
        self.max_claimed = max_claimed
        """Training episodes claimed and not over, at most (None: unbounded)."""
        self.by_id: dict[str, AgentEpisode] = {}
        self.by_key: dict[str, AgentEpisode] = {}
        self.counts = EpisodeCounts()
        self._open: list[OpenGroup] = []
        """Training groups with an episode nobody claimed yet."""
        self._ended: deque[tuple[float, str]] = deque()
        """Episodes over, by when: their ids answer a retried reward for :data:`REMEMBER_S`, then are forgotten."""
        self._ids = iter(range(1 << 62))

    # ------------------------------------------------------------------ opening
    def claim(self, wait_s: float, stop: threading.Event | None = None) -> AgentEpisode | None:
        """The next training episode to play (a new group's first when none is open), waiting up to
        ``wait_s`` for the pacing window to let a group open; None if it did not."""
        deadline = time.monotonic() + wait_s
        with self.parts.cond:
            while True:
                self.expire()
                if self.parts.finished or (stop is not None and stop.is_set()):
                    return None
                if not self._at_claim_limit() and ((episode := self._unclaimed()) is not None
                                                   or (episode := self._open_group()) is not None):
                    episode.claimed = True
                    episode.deadline = time.monotonic() + self.episode_timeout_s
                    self.counts.episodes_opened += 1
                    return episode
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.parts.cond.wait(min(remaining, 0.5))

    def _at_claim_limit(self) -> bool:
        """Whether claimed, unended training episodes fill ``max_claimed`` (call locked)."""
        if self.max_claimed is None:
            return False
        held = sum(1 for e in self.by_id.values() if e.claimed and e.over is None and e.group.slot is not None)
        return held >= self.max_claimed

    def evaluation(self, examples: list[Example], version: int) -> list[AgentEpisode]:
        """One claimed episode per held-out example, sampled at ``version`` or newer, never trained."""
        with self.parts.cond:
            episodes = []
            for example in examples:
                group = OpenGroup(None, example, version)
                episodes.append(self._episode(group, claimed=True))
            return episodes

    def _unclaimed(self) -> AgentEpisode | None:
        for group in self._open:
            for episode in group.episodes:
                if not episode.claimed and episode.over is None:
                    if all(e.claimed for e in group.episodes if e is not episode):
                        self._open.remove(group)
                    return episode
        return None

    def _open_group(self) -> AgentEpisode | None:
        books = self.parts.books
        if (opened := books.open_group(lambda: next(self.parts.examples))) is None:
            return None
        slot, example = opened
        group = OpenGroup(slot, example, books.version)
        for _ in range(self.group_size):
            self._episode(group, claimed=False)
        self._open.append(group)
        return self._unclaimed()

    def _episode(self, group: OpenGroup, claimed: bool) -> AgentEpisode:
        number = next(self._ids)
        episode = AgentEpisode(f"ep-{number}", "ep-" + secrets.token_urlsafe(24), group, len(group.episodes),
                               deadline=time.monotonic() + self.episode_timeout_s, claimed=claimed)
        group.episodes.append(episode)
        self.by_id[episode.episode_id] = episode
        self.by_key[episode.key] = episode
        return episode

    # ------------------------------------------------------------------ calls
    def playing(self, key: str) -> AgentEpisode:
        """The episode whose key is ``key``, still taking calls (:class:`EpisodeGone` otherwise)."""
        with self.parts.cond:
            episode = self.by_key.get(key)
            if episode is None:
                raise EpisodeGone("unknown episode key: open an episode with POST /rl/episodes and use its key")
            if episode.over is not None:
                raise EpisodeGone(f"episode {episode.episode_id} is over ({episode.over}): it takes no more calls")
            return episode

    def record(self, episode: AgentEpisode, call: Call, worker_id: str, held: Held) -> None:
        """A call the fleet answered, into its episode's trajectory (a call of an episode that ended
        meanwhile is not: its answer goes back, it is never trained)."""
        with self.parts.cond:
            if episode.over is not None:
                return
            abandoned = len(episode.trajectory.abandoned)
            episode.trajectory.add(call)
            episode.workers[call.call_id] = worker_id
            episode.held.append(held)
            self.counts.calls += 1
            self.counts.tokens_sampled += len(call.completion_ids)
            self.counts.calls_abandoned += len(episode.trajectory.abandoned) - abandoned

    # ------------------------------------------------------------------ endings
    def reward(self, episode_id: str, reward: float) -> AgentEpisode:
        """Set an episode's reward (it ends); its group enters the learner's buffer once all G are rewarded."""
        with self.parts.cond:
            episode = self.by_id.get(episode_id)
            if episode is None:
                raise EpisodeGone(f"no episode {episode_id!r}")
            if episode.over == "rewarded" and episode.reward == reward:
                return episode  # a retried request: applied once
            if episode.over is not None:
                raise EpisodeGone(f"episode {episode_id} is over ({episode.over}, reward {episode.reward}): "
                                  f"its reward cannot be set again")
            episode.reward, episode.over = reward, "rewarded"
            self.counts.episodes_rewarded += 1
            group = episode.group
            if group.slot is not None and all(e.over == "rewarded" for e in group.episodes):
                self._admit(group)
            self.parts.cond.notify_all()
            return episode

    def _admit(self, group: OpenGroup) -> None:
        played = [e for e in group.episodes if e.trajectory.segments]
        if len(played) < len(group.episodes):
            self._drop(group, f"{len(group.episodes) - len(played)} episode(s) made no model call")
            return
        built = self.group(group)
        quarantined = [w for w in built.workers() if (r := self.parts.registry.workers.get(w)) is None or r.quarantined]
        if quarantined:
            self._drop(group, f"sampled by quarantined worker(s) {', '.join(quarantined)}", quarantined=True)
            return
        self.parts.books.admit_group(group.slot, built.version, built)
        self.counts.groups_admitted += 1
        self.counts.segments_trained += len(built.token_ids)
        self._forget(group)

    def group(self, group: OpenGroup) -> Group:
        """The group the learner trains: a completion per segment of each episode (see the module)."""
        rows: dict[str, list] = {name: [] for name in ("prompt_ids", "token_ids", "logprobs", "masks", "turn_versions",
                                                       "turn_workers", "turn_draws", "episodes")}
        for index, episode in enumerate(group.episodes):
            for segment in episode.trajectory.segments:
                rows["prompt_ids"].append(segment.prompt_ids)
                rows["token_ids"].append(segment.episode.token_ids)
                rows["logprobs"].append(segment.episode.logprobs)
                rows["masks"].append(segment.episode.mask)
                rows["turn_versions"].append(segment.episode.turn_versions)
                rows["turn_workers"].append([episode.workers[c] for c in segment.calls])
                rows["turn_draws"].append(list(segment.turn_draws))
                rows["episodes"].append(index)
        if any(draw is None for draws in rows["turn_draws"] for draw in draws):
            rows["turn_draws"] = None  # a call of unknown draws: the group's draws go unchecked
        versions = [v for turns in rows["turn_versions"] for v in turns]
        return Group(slot=group.slot if group.slot is not None else -1, example=group.example, version=min(versions),
                     worker_id=rows["turn_workers"][0][0], rewards=[e.reward for e in group.episodes], **rows)

    def give_up(self, episode_id: str, why: str) -> None:
        """An episode its agent could not finish: dropped now, with its group (counted)."""
        with self.parts.cond:
            episode = self.by_id.get(episode_id)
            if episode is not None and episode.over is None:
                self._drop(episode.group, f"episode {episode_id}: {why}")

    def expire(self, now: float | None = None) -> int:
        """Drop the episodes past their deadline unrewarded, with their groups (call locked); how many."""
        now = time.monotonic() if now is None else now
        late = [e for e in self.by_id.values() if e.over is None and e.claimed and now > e.deadline]
        late_groups = {id(e.group): e.group for e in late}
        for group in late_groups.values():
            self._drop(group, f"an episode was not rewarded within agent.episode_timeout_s={self.episode_timeout_s:g}s")
        return len(late)

    def _drop(self, group: OpenGroup, why: str, quarantined: bool = False) -> None:
        for episode in group.episodes:
            if episode.over is None:
                episode.over = "dropped"
                self.counts.episodes_dropped += 1
        if group.slot is not None:
            self.counts.groups_dropped += 1
            self.parts.books.drop_group(group.slot, quarantined)
            log.warning("agent group of slot %d dropped: %s", group.slot, why)
        self._forget(group)
        self.parts.cond.notify_all()

    def _forget(self, group: OpenGroup) -> None:
        """The group is trained or dropped: its calls are let go; its ids and keys are kept a while
        (a retried reward is applied once, a late call told the episode is over), then forgotten."""
        if group in self._open:
            self._open.remove(group)
        now = time.monotonic()
        for episode in group.episodes:
            episode.trajectory, episode.held = Trajectory(), []
            self._ended.append((now, episode.episode_id))
        while self._ended and now - self._ended[0][0] > REMEMBER_S:
            if (gone := self.by_id.pop(self._ended.popleft()[1], None)) is not None:
                self.by_key.pop(gone.key, None)

    def finish_evaluation(self, episodes: list[AgentEpisode]) -> None:
        """Held-out episodes done with: their keys stop working."""
        with self.parts.cond:
            for episode in episodes:
                episode.over = episode.over or "dropped"
                self.by_key.pop(episode.key, None)
                self.by_id.pop(episode.episode_id, None)


