"""Durable ``tinker://`` paths: where a client's saves live under the service's directory.

A Tinker checkpoint path is ``tinker://<training_run_id>/<weights|sampler_weights>/<name>``
(the SDK's ``ParsedCheckpointTinkerPath``); here the training run is the client's model id and the
folder is ``<service dir>/checkpoints/<tenant>/<model id>/<kind>/<name>``: a path is resolved
under the caller's own tenant (:mod:`echo2.service.keys`), so another key's saves do not exist for
it, whatever it names. Nothing in a path reaches
outside that tree: a name is one path segment of letters, digits and ``._:-``, and a model id is
one the service made. Only complete saves are addressable: a name may not end as the folders a
save is written in or set aside as do (``.partial``, ``.replaced``:
:func:`echo2.learner.checkpoint.atomic_folder`), and no message names the server's own folders. The saves outlive the service, so a client resumes from them after it
restarts (``create_training_client_from_state_with_optimizer``).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from echo2.learner.checkpoint import PARTIAL, REPLACED, recover
from echo2.service.turns import RequestError

CheckpointKind = Literal["weights", "sampler_weights"]
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def _segment(text: str) -> bool:
    """Whether ``text`` may be one segment of a checkpoint path: a name a complete save can have."""
    return bool(_SEGMENT.fullmatch(text)) and ".." not in text and not text.endswith((PARTIAL, REPLACED))


@dataclass(frozen=True)
class TinkerPath:
    run_id: str
    kind: CheckpointKind
    name: str

    @property
    def uri(self) -> str:
        return f"tinker://{self.run_id}/{self.kind}/{self.name}"

    @classmethod
    def parse(cls, uri: str) -> TinkerPath:
        parts = uri.removeprefix("tinker://").split("/") if uri.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights") or not all(
                _segment(p) for p in (parts[0], parts[2])):
            raise RequestError(f"{uri[:200]!r} is not a checkpoint path of this service "
                               f"(tinker://<training run>/weights|sampler_weights/<name>)")
        return cls(parts[0], parts[1], parts[2])  # type: ignore[arg-type]


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, model_id: str, kind: CheckpointKind, name: str) -> TinkerPath:
        """The path a save of ``model_id`` called ``name`` gets (the name checked)."""
        if not _segment(name):
            raise RequestError(f"checkpoint name {name[:200]!r} must be 1-128 letters, digits and . _ : - "
                               f"starting with a letter or digit, not ending {PARTIAL} or {REPLACED}")
        return TinkerPath(model_id, kind, name)

    def folder(self, tenant: str, path: TinkerPath) -> Path:
        return self.root / tenant / path.run_id / path.kind / path.name

    def existing(self, tenant: str, uri: str) -> tuple[TinkerPath, Path]:
        """A saved checkpoint of ``tenant``'s: its path and folder; a clear error when there is none."""
        path = TinkerPath.parse(uri)
        folder = self.folder(tenant, path)
        recover(folder)
        if not folder.is_dir():
            raise RequestError(f"no checkpoint at {path.uri}")
        return path, folder

    def sweep(self, legacy_tenant: str) -> int:
        """At start: move the saves of a service from before tenants (``<model id>/`` at the top:
        model ids hold a ``:``, tenant names never do) under ``legacy_tenant``, drop what a killed
        service left half-written (``*.partial``), put back a save set aside whose replacement
        never came in; how many folders it dropped."""
        for run in [p for p in self.root.glob("*") if ":" in p.name and p.is_dir()]:
            (self.root / legacy_tenant).mkdir(parents=True, exist_ok=True)
            run.rename(self.root / legacy_tenant / run.name)
        dropped = 0
        for partial in self.root.glob(f"*/*/*/*{PARTIAL}"):
            shutil.rmtree(partial, ignore_errors=True)
            dropped += 1
        for aside in self.root.glob(f"*/*/*/*{REPLACED}"):
            recover(aside.with_name(aside.name.removesuffix(REPLACED)))
        return dropped

    def of_run(self, tenant: str, run_id: str, kind: CheckpointKind) -> list[Path]:
        """The complete saves of one of ``tenant``'s training runs, oldest first."""
        base = self.root / tenant / run_id / kind
        found = [p for p in base.glob("*") if p.is_dir() and _segment(p.name)] if base.is_dir() else []
        return sorted(found, key=lambda p: p.stat().st_mtime)
