"""The learner loop: take a fresh batch, train, publish the new version, evaluate, checkpoint.

There is one loop for every protocol: ``sync`` is the same loop with S = 0 (the coordinator's
pacing then admits only groups from the current version, which makes it a barrier). The
coordinator keeps the run's clock (step and dissemination times, activation's re-plans); the
learner only takes batches, gives back what it will not train on, publishes and reports.

Learner utilization = time spent training and publishing / (that + time waiting for data);
evaluation time is excluded from both, and so is the wait for the very first batch (workers
starting up, reported as ``startup_seconds``), so that utilization measures the pipeline alone.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from echo2.broadcast.payload import serialize_parameters
from echo2.broadcast.publisher import Publisher
from echo2.config import Config
from echo2.core.staleness import versions_trainable
from echo2.exchange import Group, NoBatch, RolloutSource
from echo2.learner import interrupts
from echo2.learner.checkpoint import save_checkpoint
from echo2.learner.dynamic_sampling import informative_batch
from echo2.learner.evaluations import Evaluated, InlineEvaluations, ProcessEvaluations
from echo2.learner.trainer import Learner, require_finite
from echo2.learner.verification import AuditPolicy, Verifier
from echo2.learner.version_cache import VersionCache
from echo2.model.draws import draw_tolerance
from echo2.model.evaluation import EvalResult, evaluate
from echo2.tasks import Example, Task
from echo2.telemetry.metrics import MetricsWriter, TimelineWriter
from echo2.telemetry.progress import Progress

log = logging.getLogger("echo2")


@dataclass
class LoopResult:
    steps: int
    wall_seconds: float
    busy_seconds: float
    idle_seconds: float
    samples: int
    startup_seconds: float = 0.0
    evals: list[tuple[int, EvalResult]] = field(default_factory=list)
    interrupted: bool = False
    """Stopped by a signal (SIGTERM, Ctrl-C) before ``run.steps``, at a step boundary, checkpointed."""
    starved: str | None = None
    """Stopped because no batch came within ``coordinator.data_timeout_s`` (:class:`DataStarved`:
    why), checkpointed at the last version trained."""

    @property
    def utilization(self) -> float:
        return self.busy_seconds / max(self.busy_seconds + self.idle_seconds, 1e-9)


#: Seconds between looks at a held stop signal while the learner waits for data.
STOP_POLL_S = 1.0

#: How long the learner waits, at the end of a run, for each evaluation the evaluator has not
#: finished (``eval.where: process`` or ``after``; a SmolLM2 evaluation takes about a minute on a
#: 2-core CPU, its evaluator's start some seconds more).
EVAL_TIMEOUT_S = 300.0


class DataStarved(TimeoutError):
    """No batch came within ``coordinator.data_timeout_s``: the fleet stopped delivering (every
    worker dead, parked or quarantined, or a broadcast stalled). The run stops as a signal stops it,
    checkpointed and with its reliability report: a learner that died here had left neither, and the
    books of why it starved with it."""


class LearnerLoop:
    def __init__(self, config: Config, state: RolloutSource, publisher: Publisher, learner: Learner, task: Task,
                 eval_examples: list[Example], run_dir: Path, metrics: MetricsWriter, timeline: TimelineWriter,
                 evaluations: ProcessEvaluations | None = None) -> None:
        self.config, self.state, self.publisher, self.learner, self.task = config, state, publisher, learner, task
        self.evaluations = evaluations or InlineEvaluations(self._evaluate)
        """Where held-out evaluation runs (:mod:`echo2.learner.evaluations`)."""
        self.eval_examples, self.run_dir = eval_examples, run_dir
        self.metrics, self.timeline = metrics, timeline
        self.progress = Progress(config.run.steps, enabled=config.telemetry.progress)
        audits = config.verification
        self.verifier = Verifier(
            AuditPolicy(audits.probation_groups, audits.audit_decay, audits.audit_floor, audits.logprob_tolerance,
                        config.rollout.temperature, audits.check_draws,
                        draw_tolerance(audits.draw_tolerance, config.model.dtype, config.rollout.engine)),
            learner.policy, learner.tokenizer,
            VersionCache(versions_trainable(config.staleness), publisher.kind, config.broadcast.dtype),  # what workers were sent
            seed=config.run.seed, dtype=config.model.dtype)

    def _evaluate(self, version: int) -> EvalResult:
        with self.learner.precision():
            result = evaluate(self.learner.sampling_policy(), self.learner.tokenizer, self.task, self.eval_examples,
                              max_new_tokens=self.config.rollout.max_new_tokens,
                              temperature=self.config.rollout.temperature, seed=self.config.run.seed + version,
                              shown=self.config.eval.show, sampled=self.config.eval.sampled)
        self._report(version, result)
        return result

    def _report(self, version: int, result: EvalResult) -> None:
        self.progress.newline()
        among = "-" if result.well_formed_accuracy is None else f"{100 * result.well_formed_accuracy:.1f}%"
        sampled = "" if result.sampled_reward is None else f" | sampled reward {100 * result.sampled_reward:.1f}%"
        log.info("eval v%d: held-out greedy accuracy %.1f%%%s | well-formed %.1f%% (accuracy among them %s) | "
                 "%.1f tokens (%d prompts)", version, 100 * result.accuracy, sampled, 100 * result.well_formed, among,
                 result.greedy_tokens, len(self.eval_examples))
        if result.first_turn_accuracy is not None:
            log.info("eval v%d: episodes: first reply right %.1f%%, right within the episode %.1f%%, %.2f turns",
                     version, 100 * result.first_turn_accuracy, 100 * result.accuracy, result.turns)
        for prompt, completion, reward in result.examples:
            log.info("  sample v%d: %s%s  (reward %.2f)", version, prompt, completion.replace("\n", "\\n"), reward)

    def _request_eval(self, version: int) -> EvalResult | None:
        """Evaluate ``version`` now (``eval.where: learner``: its result) or hand it to the evaluator (None)."""
        return self.evaluations.request(version, lambda: serialize_parameters(self.learner.policy,
                                                                                kind=self.publisher.kind))

    def _log_evaluated(self, done: list[Evaluated], result: LoopResult) -> float | None:
        """Log the evaluator's finished evaluations, each timed at its version's publish; the newest accuracy."""
        for evaluated in done:
            self._report(evaluated.version, evaluated.result)
            result.evals.append((evaluated.version, evaluated.result))
            self.metrics.log(evaluated.version, {"version": evaluated.version, "time": evaluated.published_at,
                                                 "eval_logged_time": time.time(), **evaluated.result.metrics()})
        result.evals.sort(key=lambda pair: pair[0])
        return done[-1].result.accuracy if done else None

    def _verified_batch(self, step: int, count: int) -> list[Group]:
        """The next ``count`` groups of workers that pass their audits. A suspect's groups are
        discarded (the worker quarantined) and replaced by more from the buffer, so a step still
        trains ``count`` groups: the lease window counts ``B`` groups consumed per step, and a short
        step would leave it wider for the rest of the run (more slots granted, then dropped stale)."""
        kept: list[Group] = []
        while len(kept) < count:
            batch = self._take(step, count - len(kept))
            audit = self.verifier.check(batch)
            for worker_id, why in audit.suspects.items():
                self.state.give_back([g for g in batch if worker_id in g.workers()], "suspect", why, worker_id)
            unauditable = [g for g in audit.unauditable if audit.suspects.keys().isdisjoint(g.workers())]
            if unauditable:
                self.state.give_back(unauditable, "unauditable")
            left_out = {id(g) for g in audit.unauditable}
            kept += [g for g in batch if audit.suspects.keys().isdisjoint(g.workers()) and id(g) not in left_out]
        return kept

    def _quarantine_suspects(self, trained: list[Group]) -> None:
        """Quarantine the workers of the groups the step left out (implausible log-probs, or a refused
        non-finite update) whose audit at their own version fails too, re-queueing those prompts; one
        that passes was sampled honestly and the learner's policy moved away from it: its worker stays."""
        left_out = {index: trained[index] for index in self.learner.suspects}
        confirmed = self.verifier.confirm(list(left_out.values())) if left_out else {}
        for index, why in self.learner.suspects.items():
            for worker_id in confirmed.keys() & set(left_out[index].workers()):
                self.state.give_back([left_out[index]], "suspect", f"{why}; {confirmed[worker_id]}", worker_id)
        if drifted := sum(confirmed.keys().isdisjoint(group.workers()) for group in left_out.values()):
            log.warning("%d group(s) left out of the step passed their audit at the version they claim: the "
                        "policy moved away from honest samples; their workers stay", drifted)

    def _take(self, step: int, count: int) -> list[Group]:
        """``count`` groups for ``step`` within ``coordinator.data_timeout_s``, waited for in short
        slices: while this step has taken nothing yet, a held stop signal ends the run at once."""
        timeout_s = self.config.coordinator.data_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                batch = self.state.take_batch(step, timeout_s=min(STOP_POLL_S, max(0.0, deadline - time.monotonic())),
                                              count=count)
            except NoBatch as error:
                if time.monotonic() >= deadline:
                    raise DataStarved(f"no batch for step {step} within coordinator.data_timeout_s="
                                      f"{timeout_s:g}s ({error})") from None
                if interrupts.requested() and not self._taken_this_step:
                    raise KeyboardInterrupt("stop signal while waiting for data") from None
                self.progress.waiting(error.why, timeout_s - (deadline - time.monotonic()))
                continue
            self._taken_this_step = True
            return batch

    def _batch(self, step: int) -> tuple[list[Group], list[Group], dict[str, float]]:
        """The step's batch; under DAPO's dynamic sampling also the groups it filtered out (EchoClip
        still learns from them) and their count."""
        self._taken_this_step = False
        learner = self.config.learner
        if not learner.dynamic_sampling:
            return self._verified_batch(step, learner.groups_per_step), [], {}
        sampled = informative_batch(lambda count: self._verified_batch(step, count),
                                    lambda groups: self.state.give_back(groups, "filtered"),
                                    learner.groups_per_step, learner.dynamic_sampling_rounds)
        counts = {"dapo_filtered_groups": len(sampled.filtered), "dapo_drawn_groups": sampled.drawn}
        return sampled.groups, sampled.filtered if learner.echoclip.enabled else [], counts

    def _resume_state(self, version: int, result: LoopResult) -> dict[str, Any]:
        """What :meth:`run` needs to continue after a crash at ``version`` (see checkpoint.py)."""
        return {
            "version": version,
            "loop": {"steps": result.steps, "wall_seconds": result.wall_seconds, "busy_seconds": result.busy_seconds,
                     "idle_seconds": result.idle_seconds, "samples": result.samples,
                     "startup_seconds": result.startup_seconds,
                     "evals": [(v, e.accuracy, e.sampled_reward) for v, e in result.evals]},
            "coordinator": self.state.resume_snapshot(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                    "verifier": self.verifier.rng.getstate()},
            "audit_versions": self.verifier.versions.state(),
        }

    def _restore(self, resume: dict[str, Any], result: LoopResult) -> None:
        loop = resume["loop"]
        result.steps, result.wall_seconds, result.samples = loop["steps"], loop["wall_seconds"], loop["samples"]
        result.busy_seconds, result.idle_seconds = loop["busy_seconds"], loop["idle_seconds"]
        result.startup_seconds = loop["startup_seconds"]
        result.evals = [(v, EvalResult(accuracy, sampled)) for v, accuracy, sampled in loop["evals"]]
        torch.set_rng_state(resume["rng"]["torch"])
        random.setstate(resume["rng"]["python"])
        self.verifier.rng.setstate(resume["rng"]["verifier"])
        self.verifier.versions.restore(resume.get("audit_versions", {}))
        log.info("audits can check versions %s after the restart", self.verifier.versions.versions())

    def _checkpoint(self, version: int, result: LoopResult) -> None:
        save_checkpoint(self.learner, self.run_dir, version, resume=self._resume_state(version, result))

    def _step(self, step: int, batch: list[Group], filtered: list[Group], sampling: dict[str, float], waited: float,
              started: float, start_version: int, result: LoopResult) -> int:
        """Train on ``batch``, publish the new version, log, evaluate, checkpoint; returns the version."""
        config, state = self.config, self.state
        train_start = time.time()
        record = self.learner.step(batch, version=step, echo_groups=filtered)
        self._quarantine_suspects([*batch, *filtered])
        version = step + 1
        require_finite(self.learner.policy, version)
        published = self.publisher.publish(version, self.learner.policy)
        state.publish(published)
        self.verifier.published(version, self.learner.policy)
        train_end = time.time()
        self.timeline.interval("learner", "train", train_start, train_end, version)
        if step == start_version:
            result.startup_seconds += train_start - waited
        else:
            result.idle_seconds += train_start - waited
        result.busy_seconds += train_end - train_start
        result.samples += int(record["samples"])
        result.steps += 1
        elapsed = result.wall_seconds = time.time() - started
        record.update(
            version=version,
            learner_busy_s=result.busy_seconds,
            learner_idle_s=result.idle_seconds,
            startup_s=result.startup_seconds,
            utilization=result.utilization,
            samples_per_s=result.samples / max(elapsed, 1e-9),
            broadcast_bytes=published.size_bytes,
            **({"delta_bytes": published.delta_bytes, "delta_encode_s": self.publisher.encode_s}
               if published.delta_bytes is not None else {}),
            **sampling,
            **self.verifier.pop_metrics(),
            **state.stats(config.activation.learner_price_per_hour, time.time() - started).metrics(),
        )
        accuracy = None
        if (version % config.eval.every == 0 or version == config.run.steps) and (
                evaluation := self._request_eval(version)) is not None:
            result.evals.append((version, evaluation))
            record.update(evaluation.metrics())
            accuracy = evaluation.accuracy
        self.metrics.log(version, record)
        if (arrived := self._log_evaluated(self.evaluations.finished(), result)) is not None:
            accuracy = arrived
        self.metrics.histogram("staleness", [step - g.version for g in batch], version)
        self.progress.update(version, version, record["reward_mean"], accuracy, result.utilization,
                             int(record["workers_alive"]), record["samples_per_s"])
        if config.checkpoint.every and version % config.checkpoint.every == 0:
            self._checkpoint(version, result)
        return version

    def run(self, resume: dict[str, Any] | None = None) -> LoopResult:
        """Train to ``run.steps``; ``resume`` (from a checkpoint) continues a crashed run at its version."""
        config = self.config
        result = LoopResult(steps=0, wall_seconds=0.0, busy_seconds=0.0, idle_seconds=0.0, samples=0)
        start_version = 0
        if resume is not None:
            self._restore(resume, result)
            start_version = resume["version"]
            log.info("resumed at version %d (%d steps done before)", start_version, result.steps)
        # also after a resume: the restored weights must score what they scored before the crash
        result.evals = [(v, e) for v, e in result.evals if v != start_version]
        if (evaluation := self._request_eval(start_version)) is not None:
            result.evals.append((start_version, evaluation))
            self.metrics.log(start_version, {"version": start_version, **evaluation.metrics(),
                                             "resumed": resume is not None})
        started = time.time() - result.wall_seconds
        deadline = started + 60 * config.run.max_minutes if config.run.max_minutes else float("inf")
        version = start_version
        self.verifier.published(version, self.learner.policy)  # audits need every version a group may claim
        interrupts.clear()
        try:
            for step in range(start_version, config.run.steps):
                if time.time() > deadline:
                    log.info("run.max_minutes=%s reached at step %d; stopping", config.run.max_minutes, step)
                    break
                with interrupts.deferred():  # a stop signal takes effect once the step is done
                    waited = time.time()
                    batch, filtered, sampling = self._batch(step)  # or while it waits for data, nothing taken
                    version = self._step(step, batch, filtered, sampling, waited, started, start_version, result)
        except (KeyboardInterrupt, DataStarved) as stop:
            log.warning("%s: stopping at version %d; checkpointed (continue with: echo2 train --resume %s)",
                        stop, version, self.run_dir)
            result.wall_seconds = time.time() - started
            if isinstance(stop, DataStarved):
                result.starved = str(stop)
            else:
                result.interrupted = True
            self._log_evaluated(self.evaluations.finish(timeout_s=0.0), result)
            self._checkpoint(version, result)
            self.progress.newline()
            return result
        result.wall_seconds = time.time() - started
        if version not in {v for v, _ in result.evals} | self.evaluations.pending() and (
                evaluation := self._request_eval(version)) is not None:
            result.evals.append((version, evaluation))
            self.metrics.log(version, {"version": version, **evaluation.metrics()})
        final = self.state.stats(self.config.activation.learner_price_per_hour, result.wall_seconds,
                                 settle_s=self.config.broadcast.stall_s).metrics()
        if "dissemination_s" in final:  # the last versions of the run, once they reached every worker
            self.metrics.log(version, {"version": version, "dissemination_s": final["dissemination_s"],
                                       "dissemination_max_s": final["dissemination_max_s"]})
        pending = len(self.evaluations.pending())
        self._log_evaluated(self.evaluations.finish(timeout_s=EVAL_TIMEOUT_S * max(1, pending)), result)
        self._checkpoint(version, result)
        self.progress.newline()
        return result
