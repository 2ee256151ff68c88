"""The parameters of the last S + 1 published versions, so that a group is audited at its own version.

A group sampled with version ``v`` may be trained at steps ``v .. v + S`` (bounded staleness S),
so checking its behaviour log-probs needs the policy of version ``v``, not the learner's current
one: otherwise a worker could claim an older version and never be checked. The learner keeps,
for each version it publishes, exactly what that version's payload carries (every parameter, or
a LoRA run's adapter only: :func:`echo2.broadcast.payload.wire_parameters`) in the dtype it
travels in (``broadcast.dtype``), as CPU clones: the weights an honest worker holds. Only the
newest S + 1 are kept; a group older than that is stale and never trained on. They travel with
a resumable checkpoint (:meth:`VersionCache.state`), so that after a restart a group claiming an
earlier version of the window is still audited at it.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from echo2.broadcast.payload import PAYLOAD_DTYPES, PayloadKind, wire_parameters


class VersionCache:
    def __init__(self, keep: int, kind: PayloadKind = "full", dtype: str | None = None) -> None:
        """Keep the newest ``keep`` versions (S + 1) of the ``kind`` parameters, cast to ``dtype``
        (a payload dtype name; None keeps each parameter's own)."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep, self.kind = keep, kind
        self.dtype = PAYLOAD_DTYPES[dtype] if dtype is not None else None
        self._versions: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()

    @torch.no_grad()
    def put(self, version: int, model: torch.nn.Module) -> None:
        """Remember ``model``'s parameters as ``version`` (replacing a version of that number), and
        forget the oldest beyond ``keep``."""
        tensors = {}
        for name, parameter in wire_parameters(model, self.kind).items():
            dtype = self.dtype if self.dtype is not None and parameter.is_floating_point() else parameter.dtype
            tensors[name] = parameter.detach().to(device="cpu", dtype=dtype, copy=True)
        self._versions.pop(version, None)
        self._versions[version] = tensors
        while len(self._versions) > self.keep:
            self._versions.popitem(last=False)

    def get(self, version: int) -> dict[str, torch.Tensor] | None:
        """The parameters of ``version`` (name -> CPU tensor), or None when it is not kept."""
        return self._versions.get(version)

    def versions(self) -> list[int]:
        """The versions kept, oldest put first."""
        return list(self._versions)

    def state(self) -> dict[int, dict[str, torch.Tensor]]:
        """Every kept version's parameters, for a resumable checkpoint."""
        return dict(self._versions)

    def restore(self, state: dict[int, dict[str, torch.Tensor]]) -> None:
        """Keep the versions of :meth:`state` (the newest ``keep`` of them), as before a restart."""
        for version in sorted(state)[-self.keep:]:
            self._versions.pop(version, None)
            self._versions[version] = state[version]

    def __contains__(self, version: int) -> bool:
        return version in self._versions
