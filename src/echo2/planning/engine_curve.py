"""How long an inference engine takes to generate a batch: its throughput as the batch drains.

A decoding step generates one token for each of the ``n`` sequences in flight, and on a GPU (or
this CPU) its time grows about linearly with ``n``: ``step(n) = fixed_s + per_sequence_s * n`` —
the weights are read once per step whatever ``n`` is, each sequence adds its KV-cache reads and
its share of the compute. So one sequence alone decodes at ``1 / step(1)`` tokens/s and a full
batch at ``n / step(n)``: a batch's throughput falls as its sequences finish, and a synchronous
step whose last response is long waits for it at single-sequence speed. Two points fix the line:
the engine's throughput at a full batch (what benchmarks report) and one sequence alone;
``echo2 calibrate`` fits it to the shipped engine on this machine.

How sequences share the engine (:attr:`DecodeCurve.continuous`):

* **continuous batching** (vLLM, SGLang): a finished sequence leaves the batch at once and the next
  waiting one takes its slot, up to ``max_sequences`` (the engine's KV room);
* **static batching** (echo2's own engine, ``model/sampling.py``): a batch of up to ``max_sequences``
  rows decodes until its longest row is done, finished rows riding along.

A flat curve (``fixed_s = 0``) keeps its rate to the last token: the planner's assumption before
lengths were a distribution, which every response equal to the mean reproduces exactly.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from echo2.config.fleet import WorkerClass

#: Leases drawn to estimate a worker's rate (:func:`lease_rollouts_per_s`): enough for a few percent.
LEASE_DRAWS = 200


@dataclass(frozen=True)
class DecodeCurve:
    fixed_s: float
    """Seconds of one decoding step whatever the batch (weight reads, kernel launches)."""
    per_sequence_s: float
    """Seconds each sequence in flight adds to a step."""
    max_sequences: int | None = None
    """Sequences in flight at most (the KV room, ``max_num_seqs``); None: unlimited."""
    continuous: bool = True
    """Continuous batching (a finished sequence's slot is taken at once); False: static batches."""

    def __post_init__(self) -> None:
        if self.fixed_s < 0 or self.per_sequence_s <= 0:
            raise ValueError(f"a decode curve needs fixed_s >= 0 and per_sequence_s > 0, got "
                             f"{self.fixed_s}, {self.per_sequence_s}")
        if self.max_sequences is not None and self.max_sequences < 1:
            raise ValueError(f"max_sequences must be >= 1, got {self.max_sequences}")

    @classmethod
    def flat(cls, tokens_per_s: float, max_sequences: int | None = None) -> DecodeCurve:
        """``tokens_per_s`` at any concurrency, to the last token."""
        return cls(0.0, 1 / tokens_per_s, max_sequences)

    @classmethod
    def through(cls, single_tokens_per_s: float, full_tokens_per_s: float, full_sequences: int,
                max_sequences: int | None = None, continuous: bool = True) -> DecodeCurve:
        """The line through one sequence at ``single_tokens_per_s`` and ``full_sequences`` at
        ``full_tokens_per_s`` together, cut at ``max_sequences`` (default ``full_sequences``)."""
        full_step = full_sequences / full_tokens_per_s
        single_step = 1 / single_tokens_per_s
        if full_sequences < 2 or full_step < single_step or full_tokens_per_s < single_tokens_per_s:
            raise ValueError(f"{full_sequences} sequences at {full_tokens_per_s:g} tokens/s and one at "
                             f"{single_tokens_per_s:g}: a batch must be faster in all and slower per sequence")
        per_sequence = (full_step - single_step) / (full_sequences - 1)
        return cls(single_step - per_sequence, per_sequence, max_sequences or full_sequences, continuous)

    @classmethod
    def fitted(cls, steps: Sequence[tuple[int, float]], continuous: bool = True) -> DecodeCurve:
        """The least-squares line through measured ``(sequences, seconds per decoding step)``."""
        if len({n for n, _ in steps}) < 2:
            raise ValueError("a decode curve needs steps measured at two batch sizes at least")
        mean_n = statistics.fmean(n for n, _ in steps)
        mean_s = statistics.fmean(s for _, s in steps)
        slope = (sum((n - mean_n) * (s - mean_s) for n, s in steps) / sum((n - mean_n) ** 2 for n, _ in steps))
        if slope <= 0:
            raise ValueError(f"decoding steps did not get slower with the batch ({steps}): nothing to fit")
        return cls(max(0.0, mean_s - slope * mean_n), slope, continuous=continuous)

    def step_s(self, sequences: int) -> float:
        return self.fixed_s + self.per_sequence_s * sequences

    def tokens_per_s(self, sequences: int) -> float:
        """Throughput with ``sequences`` in flight (cut at :attr:`max_sequences`)."""
        n = min(sequences, self.max_sequences or sequences)
        return n / self.step_s(n)

    def drain_s(self, lengths: Sequence[float]) -> float:
        """Seconds to generate every one of ``lengths`` (tokens), started together in this order."""
        if not lengths:
            return 0.0
        if not self.continuous:
            size = self.max_sequences or len(lengths)
            return sum(max(batch) * self.step_s(len(batch))
                       for batch in (lengths[i:i + size] for i in range(0, len(lengths), size)))
        if self.fixed_s == 0:  # a flat curve: the rate never changes, only the tokens count
            return self.per_sequence_s * math.fsum(lengths)
        limit = self.max_sequences or len(lengths)
        waiting = iter(lengths)
        done_at: list[float] = []  # each sequence in flight: the progress (tokens per sequence) it ends at
        progress = elapsed = 0.0
        for length in waiting:
            heapq.heappush(done_at, length)
            if len(done_at) == limit:
                break
        while done_at:
            elapsed += (done_at[0] - progress) * self.step_s(len(done_at))
            progress = heapq.heappop(done_at)
            while done_at and done_at[0] <= progress:
                heapq.heappop(done_at)
            while len(done_at) < limit and (length := next(waiting, None)) is not None:
                heapq.heappush(done_at, progress + length)
        return elapsed


def worker_curve(spec: WorkerClass, response_tokens: float) -> DecodeCurve:
    """A worker's engine: ``tokens_per_s`` (or ``rollouts_per_s`` of mean-length responses) at its
    full batch, falling to ``single_sequence_tokens_per_s`` when it is given."""
    full = spec.tokens_per_s or spec.rollouts_per_s * response_tokens
    if spec.single_sequence_tokens_per_s is None:
        return DecodeCurve.flat(full, spec.max_sequences)
    return DecodeCurve.through(spec.single_sequence_tokens_per_s, full, spec.max_sequences,
                               continuous=spec.batching == "continuous")


def lease_rollouts_per_s(curve: DecodeCurve, group_lengths: Callable[[random.Random], list[float]], groups: int,
                         seed: int = 0) -> float:
    """Rollouts/s of a worker generating leases of ``groups`` groups (each drawn by
    ``group_lengths``) one after another, each submitted when its longest response is done: the
    mean over :data:`LEASE_DRAWS` drawn leases. What a worker's rate is once its leases drain."""
    rng = random.Random(seed)
    leases = [[x for _ in range(groups) for x in group_lengths(rng)] for _ in range(LEASE_DRAWS)]
    return sum(map(len, leases)) / math.fsum(curve.drain_s(lease) for lease in leases)
