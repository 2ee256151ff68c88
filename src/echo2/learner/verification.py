"""Audits of what workers submit: behaviour log-probs recomputed under each group's own version.

Workers are remote and not all trustworthy. Of what the learner trains on, the **rewards** are not
a worker's word: the coordinator computes them from the submitted tokens
(:mod:`echo2.coordinator.scoring`). What remains a worker's word is the **behaviour log-probs**
(the denominators of the importance weights) and the **version** it says it sampled with. An
audit recomputes an audited group's log-probs under the policy of the group's own version and
compares; a mean absolute difference above ``logprob_tolerance`` nats per token, or one token
beyond ``LOG_RATIO_LIMIT`` nats, means the worker sampled from other weights or at another
temperature, or made the numbers up. From the same distributions it checks the draws
(:mod:`echo2.model.draws`): each audited token must be the one its lease's uniform picks, within
``draw_tolerance``; else the worker chose the text (substituted, repeated one answer, picked
among tries) and reported its true log-probs, which the log-prob check alone never caught. Every version a group may still be trained at (the last
S + 1) is kept by :class:`~echo2.learner.version_cache.VersionCache`, so claiming an older version
hides nothing.

The audit model is a worker's sampler, rebuilt on the learner: one scratch copy of the policy,
made at the first audit, with its trainable parameters in ``model.dtype`` and no autocast (what
the ``hf`` engine computes in), a LoRA run's adapter merged into a plain copy
(:class:`~echo2.model.lora.MergedCopy`, as workers sample); each audited version's published parameters
are loaded into it. An honest worker's log-probs agree with it to float precision (plus sampling
versus scoring arithmetic, well inside the tolerance).

Audit rates (:class:`AuditRates`) are per worker: a new worker's first ``probation_groups`` groups
are all audited; after that each clean audit multiplies its rate by ``audit_decay``, down to
``audit_floor``. A worker that fails an audit is returned as a suspect with the reason; the loop
quarantines it (:meth:`echo2.coordinator.state.CoordinatorState.quarantine`) and drops its groups.
"""

from __future__ import annotations

import copy
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from echo2.broadcast.payload import wire_parameters
from echo2.core.draw_rule import turn_uniforms
from echo2.exchange import Group
from echo2.learner.logprobs import completion_scores
from echo2.learner.objectives.surrogate import LOG_RATIO_LIMIT
from echo2.learner.version_cache import VersionCache
from echo2.model.draws import draw_gaps
from echo2.model.loading import DTYPES
from echo2.model.lora import MergedCopy, has_adapter

#: Most completions recomputed in one forward pass.
ROWS_PER_PASS = 256


#: How a draw check's failure begins (:func:`audit_failure`).
CHOSEN = "tokens not drawn from their lease's randomness"


def audit_failure(gap: float, worst: float, drawn_off: float, *, logprob_tolerance: float,
                  draw_tolerance: float | None, against: str) -> str | None:
    """Why an audited sample fails, or None: its behaviour log-probs differ from the audit's by
    ``gap`` nats a token on average (``worst`` at one token) beyond ``logprob_tolerance`` or
    :data:`LOG_RATIO_LIMIT`, or (where the draws are checked: ``draw_tolerance``) a token lies
    ``drawn_off`` outside the interval its draw picks. ``against`` names what it was audited
    against (a version, a sampler). One rule for the learner's audits and a training service's."""
    if gap > logprob_tolerance or worst > LOG_RATIO_LIMIT:
        return (f"behaviour log-probs differ by {gap:.3f} nats/token from {against} (tolerance {logprob_tolerance}; "
                f"{worst:.1f} at its worst token, limit {LOG_RATIO_LIMIT:g})")
    if draw_tolerance is not None and drawn_off > draw_tolerance:
        return (f"{CHOSEN}: a token lies {drawn_off:.3f} outside the interval its draw picks under {against} "
                f"(tolerance {draw_tolerance}): chosen, not sampled")
    return None


@dataclass(frozen=True)
class AuditPolicy:
    probation_groups: int
    decay: float
    floor: float
    logprob_tolerance: float
    temperature: float
    check_draws: bool = True
    draw_tolerance: float = 0.01


@dataclass
class AuditResult:
    suspects: dict[str, str]
    """Worker id -> why its group failed an audit (the loop quarantines it)."""
    unauditable: list[Group]
    """Drawn groups whose version is not kept: left out of the batch, their prompts re-queued."""


class AuditRates:
    """Each worker's audit rate: 1 for its first ``probation_groups`` audits (every one of its
    groups until then), then ``decay`` to the power of its clean audits since, never below ``floor``."""

    def __init__(self, probation_groups: int, decay: float, floor: float) -> None:
        self.probation_groups, self.decay, self.floor = probation_groups, decay, floor
        self.clean: Counter[str] = Counter()

    def rate(self, worker_id: str) -> float:
        beyond = self.clean[worker_id] - self.probation_groups
        return 1.0 if beyond < 0 else max(self.floor, self.decay ** beyond)

    def passed(self, worker_id: str) -> None:
        """One more clean audit of ``worker_id`` (:class:`Verifier` counts an audit in advance, as it
        draws it: one that fails quarantines the worker, whose rate then no longer matters)."""
        self.clean[worker_id] += 1


class Verifier:
    def __init__(self, policy: AuditPolicy, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 versions: VersionCache, seed: int, dtype: str = "float32") -> None:
        """Audits groups against ``versions``, the published versions of ``model`` (the learner's
        policy, copied once for the audits) whose workers sample in ``dtype`` (``model.dtype``)."""
        self.policy, self.model, self.tokenizer, self.versions = policy, model, tokenizer, versions
        self.dtype = DTYPES[dtype]
        self.rates = AuditRates(policy.probation_groups, policy.decay, policy.floor)
        self.rng = random.Random(seed)
        self._scratch: torch.nn.Module | None = None
        self._merged: MergedCopy | None = None
        self._loaded: tuple[int, int] | None = None  # (version, id of its parameters) in the scratch copy
        self._tally: Counter[str] = Counter()
        self.totals: Counter[str] = Counter()
        """Audited groups, groups left out because their version was not kept, failed audits (whole run)."""

    def published(self, version: int, model: torch.nn.Module) -> None:
        """Keep ``version`` (just published from ``model``) for audits; its cost counts as audit time."""
        started = time.perf_counter()
        self.versions.put(version, model)
        self._tally["audit_seconds"] += time.perf_counter() - started

    def check(self, batch: list[Group]) -> AuditResult:
        """The suspect workers (id -> why), from the audits of the groups of ``batch`` drawn at their
        workers' rates (group by group, in order, each rate as the audits drawn before it left it),
        and the drawn groups that could not be audited: their version is not kept (a restart that
        lost it), and such a group is never trained unaudited."""
        started = time.perf_counter()
        drawn: dict[int, list[Group]] = defaultdict(list)
        unauditable: list[Group] = []
        for group in batch:
            workers = group.workers()  # an agent's group: each call's worker (the least trusted draws the audit)
            rate = max(self.rates.rate(worker_id) for worker_id in workers)
            self._tally["rate_sum"] += rate
            self._tally["groups"] += 1
            if self.rng.random() >= rate:
                continue
            versions = group.versions()  # an episode's turns may span versions: each is audited at its own
            if any(version not in self.versions for version in versions):
                self.totals["groups_unauditable"] += 1
                self._tally["groups_unauditable"] += 1
                unauditable.append(group)
                continue
            for version in versions:
                drawn[version].append(group)
            for worker_id in workers:
                self.rates.passed(worker_id)
        suspects = self._audit(drawn)
        self._tally["audit_seconds"] += time.perf_counter() - started
        return AuditResult(suspects=suspects, unauditable=unauditable)

    def confirm(self, groups: list[Group]) -> dict[str, str]:
        """The suspect workers (id -> why) among those of ``groups``, each group audited at its own
        version(s) whatever its worker's rate. For groups the learner's step left out (log-probs
        implausible under its *current* policy, or a refused non-finite update): far from the
        current policy is not proof of a lie, since a policy that moved a lot in S versions (no
        off-policy correction, several updates per batch) strays from honest samples too; the
        version the group claims is the test. A group whose version is not kept cannot be confirmed
        and names no suspect (it was not trained on)."""
        started = time.perf_counter()
        drawn: dict[int, list[Group]] = defaultdict(list)
        for group in groups:
            if all(version in self.versions for version in group.versions()):
                for version in group.versions():
                    drawn[version].append(group)
        suspects = self._audit(drawn)
        self._tally["audit_seconds"] += time.perf_counter() - started
        return suspects

    def _audit(self, drawn: dict[int, list[Group]]) -> dict[str, str]:
        """Audit each version's ``drawn`` groups at that version: the workers whose turns fail (an
        agent's group answers for each of its workers apart)."""
        suspects: dict[str, str] = {}
        for version in sorted(drawn):
            parameters = self.versions.get(version)
            assert parameters is not None
            model = self._audit_model(version, parameters)
            for group in drawn[version]:
                if version == group.versions()[0]:  # counted once, however many versions its turns span
                    self._tally["audited_groups"] += 1
                    self.totals["audited_groups"] += 1
            pieces = [(g, w) for g in drawn[version] for w in g.workers() if w not in suspects]
            for (group, worker_id), (gap, worst, tokens, drawn_off) in zip(pieces, self._gaps(model, pieces, version)):
                if worker_id in suspects or not tokens:
                    continue
                self.totals["draw_gap_max"] = max(self.totals["draw_gap_max"], drawn_off)
                self._tally["draw_gap_max"] = max(self._tally["draw_gap_max"], drawn_off)
                policy = self.policy
                failed = audit_failure(gap, worst, drawn_off, logprob_tolerance=policy.logprob_tolerance,
                                       draw_tolerance=policy.draw_tolerance if policy.check_draws else None,
                                       against=f"v{version}'s, the version the group claims")
                if failed is not None:
                    self.totals["audits_failed"] += 1
                    self.totals["draws_failed"] += failed.startswith(CHOSEN)
                    suspects[worker_id] = failed
        return suspects

    def pop_metrics(self) -> dict[str, float]:
        """Audit metrics since the last call (one learner step): ``audit_rate_mean`` (the mean
        probability with which the step's groups were audited), ``audited_groups``, ``audit_seconds``,
        ``groups_unauditable`` (drawn for an audit whose version is not kept: left out),
        ``audit_draw_gap_max`` (the farthest an audited token's draw fell outside its interval: an
        honest fleet's margin under ``verification.draw_tolerance``)."""
        tally, self._tally = self._tally, Counter()
        return {"audit_rate_mean": tally["rate_sum"] / max(tally["groups"], 1),
                "audited_groups": tally["audited_groups"], "audit_seconds": tally["audit_seconds"],
                "groups_unauditable": tally["groups_unauditable"], "audit_draw_gap_max": tally["draw_gap_max"]}

    @torch.no_grad()
    def _audit_model(self, version: int, parameters: dict[str, torch.Tensor]) -> torch.nn.Module:
        """The scratch copy holding ``version``'s ``parameters``, as a worker samples with it."""
        if self._scratch is None:
            # frozen parameters (a LoRA base) never change: the copy shares them with the policy
            frozen = {id(p): p for p in self.model.parameters() if not p.requires_grad}
            self._scratch = copy.deepcopy(self.model, memo=frozen).eval()
            if has_adapter(self._scratch):  # workers sample from a merged copy (adapter as trained)
                self._merged = MergedCopy(self._scratch)
            else:  # workers hold every parameter in model.dtype (the policy: in learner.master_dtype)
                for parameter in self._scratch.parameters():
                    if parameter.is_floating_point():
                        parameter.data = parameter.data.to(self.dtype)
        if self._loaded != (version, id(parameters)):
            targets = wire_parameters(self._scratch, self.versions.kind)
            for name, tensor in parameters.items():
                targets[name].copy_(tensor)
            if self._merged is not None:
                self._merged.refresh()
            self._loaded = (version, id(parameters))
        return self._merged.model if self._merged is not None else self._scratch

    @torch.no_grad()
    def _gaps(self, model: torch.nn.Module, pieces: list[tuple[Group, str]],
              version: int) -> list[tuple[float, float, int, float]]:
        """Per (group, worker): mean and worst |recomputed - reported| log-prob over the tokens of its
        completions that ``version`` sampled on that worker (the model's own, not those an
        environment inserted), how many tokens that is, and how far its farthest token lies
        outside the interval its draw picks (0 when every token is drawn, or no draws are recorded)."""
        encode = lambda text: self.tokenizer(text)["input_ids"]  # noqa: E731
        prompts = {id(g): g.prompt_rows(encode) for g, _ in pieces}
        rows = [(k, g, i) for k, (g, _) in enumerate(pieces) for i in range(len(g.token_ids))]
        gap, tokens, worst = torch.zeros(len(pieces)), torch.zeros(len(pieces)), torch.zeros(len(pieces))
        drawn_off = torch.zeros(len(pieces), dtype=torch.float64)
        checks_draws = self.policy.check_draws
        for start in range(0, len(rows), ROWS_PER_PASS):
            chunk = rows[start : start + ROWS_PER_PASS]
            scores = completion_scores(model, [prompts[id(g)][i] for _, g, i in chunk],
                                       [g.token_ids[i] for _, g, i in chunk], pad_id=self.tokenizer.pad_token_id,
                                       temperature=self.policy.temperature, intervals=checks_draws)
            logprobs, mask = scores.logprobs, scores.mask
            reported = torch.zeros_like(logprobs)
            uniforms = torch.full(logprobs.shape, float("nan"), dtype=torch.float64)
            for row, (k, g, i) in enumerate(chunk):
                reported[row, : len(g.logprobs[i])] = torch.tensor(g.logprobs[i], dtype=reported.dtype)
                mask[row, : len(g.logprobs[i])] *= torch.tensor(g.mask_at(i, version, pieces[k][1]), dtype=mask.dtype,
                                                                device=mask.device)
                if checks_draws and g.turn_draws is not None:
                    drawn = turn_uniforms(len(g.token_ids[i]), g.model_mask(i), g.turn_draws[i])
                    uniforms[row, : len(drawn)] = torch.tensor([float("nan") if u is None else u for u in drawn],
                                                               dtype=torch.float64)
            token_gaps = ((logprobs - reported).abs() * mask).cpu()
            per_row, counted, row_worst = token_gaps.sum(dim=1), mask.sum(dim=1).cpu(), token_gaps.amax(dim=1)
            if scores.intervals is not None:
                low, high = (bound.cpu() for bound in scores.intervals)
                off = draw_gaps(low, high, uniforms)
                counted_off = torch.where((mask.cpu() > 0) & ~torch.isnan(off), off, 0.0).amax(dim=1)
            for row, (k, _, _) in enumerate(chunk):
                gap[k] += per_row[row]
                tokens[k] += counted[row]
                worst[k] = torch.maximum(worst[k], row_worst[row])
                if scores.intervals is not None:
                    drawn_off[k] = torch.maximum(drawn_off[k], counted_off[row])
        return list(zip((gap / tokens.clamp(min=1)).tolist(), worst.tolist(), tokens.int().tolist(),
                        drawn_off.tolist()))
