"""Held-out evaluation of the versions the learner publishes: on its critical path, or off it.

``eval.where: learner`` evaluates a due version in the learner process before the next step
(200 greedy and 200 sampled completions of the SmolLM2 recipe took 50-60 s on a 2-core CPU, about
a quarter of the recipe's wall time, the learner waiting). ``eval.where: process`` hands the
version's weights to an evaluator process (:mod:`echo2.launch.evaluator`) and keeps training: the
weights go as a file into ``RUN_DIR/evals/`` (written whole, then renamed into place), the
result comes back as a JSON file beside it. A finished evaluation is logged with the version it
evaluated and that version's publish time, so accuracy against wall time measures training. Files,
not sockets: the evaluator is a child of the learner on the same host and the run directory is
the learner's own. ``eval.where: after`` starts the same evaluator only when training ends: the
due versions wait as files, and no evaluation shares the CPUs with training while it runs (what a
benchmark of time to an accuracy wants on a machine whose every core is spoken for).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from echo2.broadcast.integrity import sha256
from echo2.model.evaluation import EvalResult

log = logging.getLogger("echo2")

#: Seconds between looks for finished evaluations while the learner waits for the last ones.
POLL_S = 0.2


@dataclass
class Evaluated:
    version: int
    result: EvalResult
    published_at: float
    """Wall-clock time (``time.time()``) the evaluated version was published."""


def result_from_json(data: dict) -> EvalResult:
    return EvalResult(**{**data, "examples": [tuple(example) for example in data["examples"]]})


def result_to_json(result: EvalResult) -> dict:
    return asdict(result)


def payload_path(folder: Path, version: int) -> Path:
    return folder / f"v{version:07d}.safetensors"


def result_path(folder: Path, version: int) -> Path:
    return folder / f"v{version:07d}.json"


class InlineEvaluations:
    """Evaluate each requested version at once, in the learner process (the learner waits)."""

    def __init__(self, evaluate: Callable[[int], EvalResult]) -> None:
        self.evaluate = evaluate

    def request(self, version: int, payload: Callable[[], bytes]) -> EvalResult | None:  # noqa: ARG002
        return self.evaluate(version)

    def pending(self) -> set[int]:
        return set()

    def finished(self) -> list[Evaluated]:
        return []

    def finish(self, timeout_s: float) -> list[Evaluated]:  # noqa: ARG002
        return []


class ProcessEvaluations:
    """Hand each requested version to the evaluator process; collect what it finished. ``deferred``:
    start the evaluator only in :meth:`finish` (``eval.where: after``), after calling ``before_start``
    (the run stops its workers there, so that the evaluator has the host's cores to itself)."""

    def __init__(self, run_dir: Path, deferred: bool = False, before_start: Callable[[], None] = lambda: None) -> None:
        self.run_dir, self.before_start = run_dir, before_start
        self.folder = run_dir / "evals"
        self.folder.mkdir(exist_ok=True)
        (self.folder / "stop").unlink(missing_ok=True)
        self.published: dict[int, float] = {}
        """Versions handed over and not evaluated yet: when each was published."""
        self.failed = False
        self.log_file = (self.folder / "evaluator.log").open("ab")
        self.process: subprocess.Popen | None = None if deferred else self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "echo2.launch.evaluator", str(self.run_dir)],
                                stdout=self.log_file, stderr=subprocess.STDOUT)

    def request(self, version: int, payload: Callable[[], bytes]) -> EvalResult | None:
        """Write ``version``'s weights for the evaluator (whole, then renamed into place); nothing
        once the evaluator has exited (its log says why)."""
        if self.process is not None and self.process.poll() is not None:
            if not self.failed:
                log.error("the evaluator exited (code %s; see %s): held-out evaluation stops",
                          self.process.returncode, self.log_file.name)
                self.failed = True
            return None
        data = payload()
        path = payload_path(self.folder, version)
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        path.with_suffix(".sha256").write_text(sha256(data))
        partial.rename(path)
        self.published[version] = time.time()
        return None

    def pending(self) -> set[int]:
        return set(self.published)

    def finished(self) -> list[Evaluated]:
        """Evaluations the evaluator finished since the last call, oldest version first."""
        done = []
        for version in sorted(self.published):
            path = result_path(self.folder, version)
            if path.is_file():
                done.append(Evaluated(version, result_from_json(json.loads(path.read_text())),
                                      self.published.pop(version)))
        return done

    def finish(self, timeout_s: float) -> list[Evaluated]:
        """Wait up to ``timeout_s`` for the evaluations still pending (starting a deferred evaluator
        now), then stop the evaluator."""
        (self.folder / "stop").touch()
        if self.process is None:
            self.before_start()
            self.process = self._start()
        deadline = time.monotonic() + timeout_s
        done = self.finished()
        while self.published and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            done += self.finished()
        done += self.finished()
        if self.published:
            log.warning("the evaluator did not evaluate versions %s within %.0f s (exit code %s; see %s)",
                        sorted(self.published), timeout_s, self.process.poll(), self.log_file.name)
        self.stop()
        return done

    def stop(self) -> None:
        """End the evaluator now (what it has not finished is not evaluated)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log_file.close()
