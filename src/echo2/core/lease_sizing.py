"""How many groups a worker asks for per lease when leases are sized to its device
(``rollout.groups_per_lease: device``).

A lease's groups are generated as one batch (G rows per prompt), and on a GPU a decoding step
costs about the same for 64 rows as for 1024 (it is bound by kernel launches and weight reads,
docs/results/gpu-check.json): the throughput a worker gets is the batch it can hold. So a worker
asks for as many groups as fit the memory its device has free, and never more than the
coordinator grants one lease (the staleness window, ``(S + 1) * B`` slots, cut to the worker's
share of it while others are live: :mod:`echo2.core.shares`). Clock-free and torch-free: the
engine measures the memory and the model's shapes, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Of the device's free memory, the part a lease's batch may take: the rest is headroom for the
#: allocator's fragmentation, the prefill's transient activations and the next version's staging.
USABLE_SHARE = 0.8

#: Float32 copies of one row's vocabulary-wide distribution a decoding step holds at once (the
#: logits, their temperature-scaled log-softmax, the sampling noise, the choice's scratch).
LOGIT_COPIES = 4


@dataclass(frozen=True)
class DecodeFootprint:
    """The memory one batch row takes while it decodes, from the model's shapes."""

    kv_bytes_per_token: int
    """Keys and values of one token over every layer: 2 x layers x KV heads x head dim x element size."""
    vocab_size: int

    def row_bytes(self, context_tokens: int) -> int:
        """One row's KV cache over ``context_tokens`` plus its step's distributions."""
        return self.kv_bytes_per_token * context_tokens + LOGIT_COPIES * 4 * self.vocab_size


def groups_that_fit(free_bytes: int, footprint: DecodeFootprint, group_size: int, context_tokens: int,
                    most: int) -> int:
    """Groups of ``group_size`` rows, each up to ``context_tokens`` long, whose decoding fits
    :data:`USABLE_SHARE` of ``free_bytes``; at least 1 (a worker that cannot hold one group
    still asks for one, and its engine's out-of-memory error says why), at most ``most``."""
    rows = int(USABLE_SHARE * free_bytes) // max(1, footprint.row_bytes(context_tokens))
    return max(1, min(most, rows // group_size))
