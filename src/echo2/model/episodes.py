"""Multi-turn episodes with exact token continuity: what a worker (and the learner's evaluation)
runs when a task's environment answers the model.

An episode alternates model turns and environment turns. The model's tokens are kept exactly as
sampled (never decoded and re-encoded), with the behaviour log-prob of each; the environment's
answer (an observation, a tool result, feedback) is rendered as text by the task and encoded
once, and those ids are appended to the context as they are. So the sequence the learner trains
on is, token for token, the one the policy saw and produced, and its loss mask marks the model's
own tokens (1) apart from the inserted ones (0), which are context only.

Each model turn records the policy version that sampled it: a worker may swap in newer weights
between two turns of a long episode (``between_turns``), or between two decoding steps (an
in-flight update, :class:`~echo2.model.sampling.WeightUpdates`: the turn's ``switches`` say where a
newer version took over), and the learner audits and corrects each span against its own version
(its tokens carry their own behaviour log-probs; :func:`token_versions`). A
single-turn task is the one-turn case: one sample, no environment call, a mask of ones.

The environment's answers come from ``respond``: on a worker, the coordinator (which holds the
reference answers the environment may need, and checks at submission that the inserted tokens
are what it would have answered); in evaluation, the task itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the coordinator replays episodes and imports no torch
    from echo2.model.draws import Draws
    from echo2.model.sampling import Samples

#: ``respond(rows, replies)``: for each row still playing, its model replies so far (decoded);
#: returns the environment's next message for each, or None where the episode is over.
Respond = Callable[[list[int], list[list[str]]], Sequence["str | None"]]


@dataclass
class Episode:
    """One rollout after its prompt: every token, model's and environment's, with provenance."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    """Behaviour log-prob of each model token; 0.0 at inserted tokens (never used: masked)."""
    mask: list[int] = field(default_factory=list)
    """1: sampled by the model (trained); 0: inserted by the environment (context only)."""
    turn_versions: list[int] = field(default_factory=list)
    """The policy version that sampled each model turn (its first token)."""
    switches: list[tuple[int, int]] = field(default_factory=list)
    """In-flight updates: (token index, version) where a newer version's logits took over within a turn."""
    replies: list[str] = field(default_factory=list)
    """Each model turn, decoded: what the environment was shown."""
    observations: list[str] = field(default_factory=list)
    """Each environment message, as inserted."""

    def add(self, ids: list[int], logprobs: list[float] | None, versions: Sequence[int] | None = None) -> None:
        """Append a model turn (``logprobs`` given; ``versions``: each token's, when they may
        differ) or an inserted one (None)."""
        if versions is not None:
            held = self.turn_versions[-1] if self.turn_versions else versions[0]
            held = max([held, *(version for _, version in self.switches)])
            for index, version in enumerate(versions):
                if version > held:
                    self.switches.append((len(self.token_ids) + index, version))
                    held = version
        self.token_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.mask += [1 if logprobs is not None else 0] * len(ids)

    @property
    def turns(self) -> int:
        return len(self.turn_versions)


def observation_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids an environment message is inserted as: ``text`` encoded on its own, no special
    tokens added (a chat task's message already carries its template's markers as text). Workers
    insert these and the coordinator checks against them, with the same tokenizer."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def token_versions(length: int, mask: Sequence[int] | None, turn_versions: Sequence[int],
                   switches: Sequence[tuple[int, int]]) -> list[int | None]:
    """The version that sampled each of an episode's ``length`` tokens (None at inserted ones): its
    turn's version (``turn_versions``, one per model turn), or the newer one that took over within
    the turn at a switch (``switches``: (token index, version)). Versions only grow along an episode."""
    mask = mask if mask is not None else [1] * length
    versions: list[int | None] = [None] * length
    turns = iter(turn_versions)
    pending = sorted(switches)
    held = None
    for start, end, own in segments(mask):
        if not own:
            continue
        held = max(held or 0, next(turns))
        for index in range(start, end):
            while pending and pending[0][0] <= index:
                held = max(held, pending.pop(0)[1])
            versions[index] = held
    return versions


def segments(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """``mask`` as maximal runs ``(start, end, value)``: model turns (1) and insertions (0) in order."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for index in range(1, len(mask) + 1):
        if index == len(mask) or mask[index] != mask[start]:
            runs.append((start, index, mask[start]))
            start = index
    return runs


def run_episodes(prompt_ids: list[list[int]], *, sample: Callable[[list[list[int]], Draws | None], Samples],
                 respond: Respond, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                 max_turns: int, version: Callable[[], int], between_turns: Callable[[], None] | None = None,
                 max_context: int | None = None, eos_id: int | None = None, draws: Draws | None = None
                 ) -> list[Episode]:
    """One episode per row of ``prompt_ids`` (repeat a prompt G times for a group).

    ``draws``: the rows' draw keys (:mod:`echo2.model.draws`; None: ``sample`` draws nothing, greedy):
    each turn samples its rows' tokens from the positions after their model tokens so far, so
    an episode's draws run on across its turns as one completion's would.

    Every turn samples all rows still playing in one batch; ``respond`` then answers them; a row
    whose answer is None, or whose context with the answer would reach ``max_context`` tokens
    (the model's window less a turn's length), ends; so does one whose turn was cut off before
    ``eos_id`` (it ran out of tokens: an environment's answer is rendered after a finished
    turn). ``version()`` is read at each turn; ``between_turns()`` runs before every turn but
    the first (where a worker swaps in newer weights).
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    contexts = [list(ids) for ids in prompt_ids]
    episodes = [Episode() for _ in prompt_ids]
    playing = list(range(len(prompt_ids)))
    for turn in range(max_turns):
        if turn and between_turns is not None:
            between_turns()
        sampled_by = version()
        turn_draws = draws.select(playing, [sum(episodes[row].mask) for row in playing]) if draws else None
        samples = sample([contexts[row] for row in playing], turn_draws)
        row_versions = samples.versions or [None] * len(playing)
        for row, ids, logprobs, versions in zip(playing, samples.completion_ids, samples.logprobs, row_versions):
            episodes[row].turn_versions.append(sampled_by if versions is None else versions[0])
            episodes[row].add(ids, logprobs, versions)
            episodes[row].replies.append(decode(ids))
            contexts[row] += ids
        if turn == max_turns - 1:
            break
        if eos_id is not None:
            playing = [row for row in playing if episodes[row].token_ids[-1] == eos_id]
            if not playing:
                break
        answers = respond(playing, [episodes[row].replies for row in playing])
        still = []
        for row, answer in zip(playing, answers, strict=True):
            if answer is None:
                continue
            ids = encode(answer)
            if max_context is not None and len(contexts[row]) + len(ids) >= max_context:
                continue
            episodes[row].add(ids, None)
            episodes[row].observations.append(answer)
            contexts[row] += ids
            still.append(row)
        playing = still
        if not playing:
            break
    return episodes
