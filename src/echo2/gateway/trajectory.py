"""An agent's model calls as training sequences, token for token: the gateway's record of an episode.

An agent driven by a harness (the ``openai`` SDK, the OpenAI Agents SDK) sends the whole
conversation with every call; the gateway renders it, and the model's earlier turns come back as
text. Re-encoding that text need not give the ids the model sampled (tokenizers merge differently
across a turn's boundary), and a policy-gradient step on ids the model never produced trains a
policy nobody ran. So the gateway keeps the ids it sampled and joins calls by their *tokens*:

* a call whose prompt begins with an earlier call's whole sequence (its prompt and completion)
  **extends** it: what lies between is inserted context (a tool's result, the user's next message:
  mask 0), and the completion is the model's (mask 1, with its behaviour log-probs);
* a call whose prompt equals a sequence up to the start of one of its completions **retries**
  that turn: the turn and everything after it are abandoned (never trained), the new call
  takes its place;
* any other call (a history the agent rewrote: a summary, a branch, an edited message) starts a
  new **segment**, trained separately.

Peers' traps this avoids (AReaL's proxy, rLLM's gateway): re-tokenization drift between turns,
retries trained twice, rewritten histories glued onto sequences they never extended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from echo2.model.episodes import Episode


@dataclass(frozen=True)
class Call:
    """One model call as the gateway served it."""

    call_id: str
    prompt_ids: list[int]
    """What the model was given (the rendered conversation), as encoded for this call."""
    completion_ids: list[int]
    logprobs: list[float]
    """The behaviour log-prob of each completion token."""
    version: int
    """The policy version that sampled it."""
    draw: tuple[int, int] | None = None
    """The draw key (seed, row) its lease gave it (:mod:`echo2.core.draw_rule`): what the audit
    replays (None: not known, and the group's draws go unchecked)."""


@dataclass
class Segment:
    """Calls each extending the one before: one training sequence after its first prompt."""

    prompt_ids: list[int]
    episode: Episode = field(default_factory=Episode)
    calls: list[str] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    """Where each call's completion begins in ``episode.token_ids`` (a retry cuts back to one)."""
    turn_draws: list[tuple[int, int, int] | None] = field(default_factory=list)
    """Each call's draw key and first position (0: a call draws its completion from its own lease)."""

    @property
    def sequence(self) -> list[int]:
        """Every token so far: the first prompt, then completions and insertions."""
        return self.prompt_ids + self.episode.token_ids

    def extend(self, call: Call) -> None:
        """Append ``call``, whose prompt begins with :attr:`sequence`."""
        inserted = call.prompt_ids[len(self.sequence):]
        if inserted:
            self.episode.add(inserted, None)
        self.turn_starts.append(len(self.episode.token_ids))
        self.episode.add(call.completion_ids, call.logprobs)
        self.episode.turn_versions.append(call.version)
        self.turn_draws.append((*call.draw, 0) if call.draw is not None else None)
        self.calls.append(call.call_id)

    def cut_before(self, turn: int) -> list[str]:
        """Abandon turn ``turn`` and every later one (a retry of it came): their call ids."""
        start, dropped = self.turn_starts[turn], self.calls[turn:]
        episode = self.episode
        episode.token_ids, episode.logprobs, episode.mask = (episode.token_ids[:start], episode.logprobs[:start],
                                                            episode.mask[:start])
        del episode.turn_versions[turn:], self.calls[turn:], self.turn_starts[turn:], self.turn_draws[turn:]
        return dropped


class Trajectory:
    """An episode's calls, joined into segments as they arrive (see the module docstring)."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.abandoned: list[str] = []
        """Calls a retry replaced: served, never trained."""
        self.calls_made = 0
        """Every call recorded, kept or abandoned: what an episode's call allowance counts."""

    def add(self, call: Call) -> Segment:
        """Record ``call``; the segment it joined (or began)."""
        if len(call.logprobs) != len(call.completion_ids):
            raise ValueError(f"call {call.call_id}: {len(call.logprobs)} log-probs for "
                             f"{len(call.completion_ids)} completion tokens")
        self.calls_made += 1
        for segment in reversed(self.segments):  # the newest first: an agent most often continues it
            if _starts_with(call.prompt_ids, segment.sequence):
                segment.extend(call)
                return segment
        for segment in reversed(self.segments):
            for turn, start in enumerate(segment.turn_starts):
                if call.prompt_ids == segment.prompt_ids + segment.episode.token_ids[:start]:
                    self.abandoned += segment.cut_before(turn)
                    segment.extend(call)
                    return segment
        segment = Segment(prompt_ids=list(call.prompt_ids))
        segment.extend(call)
        self.segments.append(segment)
        return segment


def _starts_with(sequence: list[int], prefix: list[int]) -> bool:
    return len(sequence) >= len(prefix) and sequence[: len(prefix)] == prefix
