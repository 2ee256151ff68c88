"""Audits of submitted groups at their own version, adaptive audit rates, the version cache,
quarantine, deregistration and the reliability report."""

import copy

import pytest
import torch
from state_support import make_state, submit_all
from verification_support import EXAMPLE, audit_policy, sampled_group

from echo2.coordinator.records import Rejected
from echo2.exchange import Group
from echo2.learner.logprobs import completion_logprobs
from echo2.learner.verification import AuditPolicy, AuditRates, AuditResult, Verifier
from echo2.learner.version_cache import VersionCache
from echo2.model.draws import Draws
from echo2.model.loading import SHIPPED_MODEL, load_model, load_tokenizer
from echo2.model.sampling import sample
from echo2.tasks import Example


def perturbed(model, scale: float = 0.3, seed: int = 0):
    """``model`` after an update large enough to change its log-probs by ~1 nat/token."""
    changed, generator = copy.deepcopy(model), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale * parameter.std())
    return changed


@pytest.fixture(scope="module")
def shipped():
    """v4 (the shipped model), v5 (v4 after an update) and the tokenizer."""
    old, tokenizer = load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL)
    return old, perturbed(old), tokenizer


def learner_at_v5(shipped, **rates) -> Verifier:
    """The learner's verifier with S = 1: it published v4, trained, published v5 (its policy now)."""
    old, new, tokenizer = shipped
    versions = VersionCache(keep=2)
    versions.put(4, old)
    versions.put(5, new)
    return Verifier(audit_policy(**rates), new, tokenizer, versions, seed=0)


def test_a_group_claiming_an_older_version_is_audited_under_that_version(shipped):
    old, new, tokenizer = shipped
    verifier = learner_at_v5(shipped)
    honest_old = sampled_group(old, tokenizer, version=4, worker_id="honest-v4")
    honest_new = sampled_group(new, tokenizer, version=5, worker_id="honest-v5")
    # sampled with the current weights, claims v4 (S = 1: still trainable at step 5)
    other_weights = sampled_group(new, tokenizer, version=4, worker_id="other-weights", seed=1)
    # v4's tokens, log-probs made up (near-certain tokens give near-1 importance weights)
    invented = Group(**{**honest_old.__dict__, "worker_id": "invented",
                        "logprobs": [[-0.01] * len(row) for row in honest_old.logprobs]})
    suspects = verifier.check([honest_old, honest_new, other_weights, invented]).suspects
    assert set(suspects) == {"other-weights", "invented"}
    assert all("v4" in why and "nats/token" in why for why in suspects.values())
    assert verifier.pop_metrics()["audited_groups"] == 4
    # the old version is what made the honest group pass: against v5 it fails too
    assert Verifier(audit_policy(), new, tokenizer, _only(5, new), seed=0).check(
        [Group(**{**honest_old.__dict__, "version": 5})]).suspects != {}


def test_one_token_far_from_its_version_fails_an_audit_whose_mean_it_passes(shipped):
    """An honest sampler agrees with its own version at every token: one token 30 nats off is a
    lie even where the group's mean gap is under the tolerance (here a lax 5 nats/token)."""
    old, _, tokenizer = shipped
    honest = sampled_group(old, tokenizer, version=4, worker_id="one-token")
    rows = [list(row) for row in honest.logprobs]
    rows[0][0] -= 30.0
    poisoned = Group(**{**honest.__dict__, "logprobs": rows})
    assert 30.0 / sum(map(len, rows)) < 5.0
    lax = AuditPolicy(probation_groups=1000, decay=0.5, floor=0.05, logprob_tolerance=5.0, temperature=1.0)
    verifier = Verifier(lax, old, tokenizer, _only(4, old), seed=0)
    suspects = verifier.confirm([poisoned, Group(**{**honest.__dict__, "worker_id": "honest"})])
    assert set(suspects) == {"one-token"} and "at its worst token" in suspects["one-token"]


def test_text_chosen_not_sampled_is_caught_even_with_its_true_log_probs(shipped):
    """A worker that substitutes a completion, repeats one answer G times or returns its pick of
    several tries reports the true log-probs of what it returns: the log-prob check passes it,
    the draws do not."""
    old, _, tokenizer = shipped
    verifier = Verifier(audit_policy(), old, tokenizer, _only(4, old), seed=0)
    honest = sampled_group(old, tokenizer, version=4, worker_id="honest", seed=11)
    other = sampled_group(old, tokenizer, version=4, worker_id="x", seed=12)  # another lease's draws

    def truthful(group, rows, worker):  # ``rows`` returned with the true log-probs, under the lease's draws
        ids = tokenizer(EXAMPLE.prompt)["input_ids"]
        logprobs, mask = completion_logprobs(old, [ids] * 4, rows, pad_id=tokenizer.pad_token_id)
        return Group(**{**group.__dict__, "worker_id": worker, "token_ids": rows,
                        "logprobs": [logprobs[i, : len(r)].tolist() for i, r in enumerate(rows)]})

    substituted = truthful(honest, [other.token_ids[0], *honest.token_ids[1:]], "substituter")
    repeated = truthful(honest, [honest.token_ids[0]] * 4, "repeater")
    picked = truthful(honest, other.token_ids, "cherry-picker")  # a second try's completions in place of the first
    suspects = verifier.confirm([honest, substituted, repeated, picked])
    assert set(suspects) == {"substituter", "repeater", "cherry-picker"}
    assert all("chosen, not sampled" in why for why in suspects.values())
    assert verifier.totals["draws_failed"] == 3
    lax = Verifier(AuditPolicy(1000, 0.5, 0.05, 0.2, 1.0, check_draws=False), old, tokenizer, _only(4, old), seed=0)
    assert lax.confirm([substituted, repeated, picked]) == {}  # the log-prob check alone passed all three


def _only(version, model) -> VersionCache:
    versions = VersionCache(keep=1)
    versions.put(version, model)
    return versions


def test_the_audit_rate_starts_at_one_and_decays_to_the_floor_for_a_clean_worker(shipped):
    rates = AuditRates(probation_groups=3, decay=0.5, floor=0.1)
    seen = []
    for _ in range(9):
        seen.append(rates.rate("w"))
        rates.passed("w")
    assert seen == [1.0, 1.0, 1.0, 1.0, 0.5, 0.25, 0.125, 0.1, 0.1]
    assert rates.rate("newcomer") == 1.0
    # through the verifier: a clean worker's groups, one per step
    verifier = learner_at_v5(shipped, probation_groups=4, decay=0.5, floor=0.05)
    honest = sampled_group(shipped[1], shipped[2], version=5, worker_id="clean")
    steps = []
    for _ in range(150):
        assert verifier.check([honest]).suspects == {}
        steps.append(verifier.pop_metrics())
    audit_rates = [m["audit_rate_mean"] for m in steps]
    assert audit_rates[:5] == [1.0] * 5 and audit_rates[-1] == 0.05
    assert all(a >= b for a, b in zip(audit_rates, audit_rates[1:]))
    assert sum(m["audited_groups"] for m in steps) < 40 and all(m["audit_seconds"] >= 0 for m in steps)
    # rates move group by group, not batch by batch: probation then decay inside one large batch
    fresh = learner_at_v5(shipped, probation_groups=4, decay=0.5, floor=0.05)
    assert fresh.check([honest] * 40).suspects == {}
    first = fresh.pop_metrics()
    assert 5 <= first["audited_groups"] <= 12 and first["audit_rate_mean"] < 0.5  # batch by batch: 1.0
    assert fresh.rates.rate("clean") < 1.0


def test_the_version_cache_keeps_exactly_s_plus_one_versions(shipped):
    model = copy.deepcopy(shipped[0])
    for staleness in (0, 1, 3):
        versions = VersionCache(keep=staleness + 1)
        for version in range(6):
            versions.put(version, model)
        assert versions.versions() == list(range(5 - staleness, 6))
        assert versions.get(4 - staleness) is None and 5 - staleness in versions
    kept = versions.get(5)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert all(t.device.type == "cpu" for t in kept.values())
    assert not torch.equal(kept[next(iter(kept))], next(model.parameters()))  # a clone, not a view
    halved = VersionCache(keep=1, dtype="bfloat16")
    halved.put(0, model)
    assert {t.dtype for t in halved.get(0).values()} == {torch.bfloat16}  # as it travelled


def test_a_drawn_group_whose_version_is_not_kept_is_left_out_not_trained_unaudited(shipped):
    verifier = learner_at_v5(shipped)
    lost = sampled_group(shipped[0], shipped[2], version=3, worker_id="w")  # e.g. v3's weights lost in a restart
    audit = verifier.check([lost])
    assert audit.suspects == {} and audit.unauditable == [lost]
    assert verifier.totals["groups_unauditable"] == 1 and verifier.pop_metrics()["groups_unauditable"] == 1


def test_the_audit_versions_survive_a_restart(shipped):
    """The window's versions travel with the resume state: a group claiming v4 is still audited at
    v4 after a restart at v5 (before: only v5 was kept, v4 claims went unaudited)."""
    before = learner_at_v5(shipped)
    restarted = VersionCache(keep=2)
    restarted.restore(before.versions.state())
    assert restarted.versions() == before.versions.versions() == [4, 5]
    verifier = Verifier(audit_policy(), shipped[1], shipped[2], restarted, seed=0)
    liar = Group(**{**sampled_group(shipped[1], shipped[2], version=5, worker_id="liar").__dict__, "version": 4})
    audit = verifier.check([liar])
    assert set(audit.suspects) == {"liar"} and audit.unauditable == []


def test_quarantine_discards_buffered_groups_requeues_prompts_and_refuses_the_worker():
    state = make_state(staleness=1, groups_per_step=2)
    liar, honest = state.members.register("liar"), state.members.register("honest")
    liar.proven = honest.proven = True  # both past their trial of one group per lease (echo2.core.shares)
    lease = state.work.lease(liar, worker_version=0, max_groups=2, wait_s=0)
    submit_all(state, liar, lease)
    pending = state.work.lease(liar, worker_version=0, max_groups=2, wait_s=0)
    assert state.quarantine(liar.worker_id, "lied") == 2
    with pytest.raises(Rejected) as refused:
        state.work.lease(liar, worker_version=0, max_groups=1, wait_s=0)
    assert refused.value.status == 403
    with pytest.raises(Rejected):
        submit_all(state, liar, pending)
    # every prompt it held (submitted or leased) goes to the honest worker instead
    again = state.work.lease(honest, worker_version=0, max_groups=8, wait_s=0)
    assert {p.prompt for p in lease.prompts + pending.prompts} <= {p.prompt for p in again.prompts}
    report = state.reliability()
    assert report["workers_quarantined"] == 1 and report["groups_discarded_quarantined"] == 2
    assert report["leases_expired"] == 1 and report["leases_completed"] == 1


def test_deregistering_worker_hands_its_leases_back():
    state = make_state(staleness=1, groups_per_step=2)
    leaving, staying = state.members.register("preempted"), state.members.register("staying")
    leaving.proven = staying.proven = True  # both past their trial of one group per lease (echo2.core.shares)
    held = state.work.lease(leaving, worker_version=0, max_groups=4, wait_s=0)
    assert len(held.prompts) == 2  # half the window while another worker is live
    state.members.deregister(leaving)
    assert not leaving.alive and state.reliability()["workers_left"] == 1
    taken = state.work.lease(staying, worker_version=0, max_groups=4, wait_s=0)
    assert {p.prompt for p in held.prompts} <= {p.prompt for p in taken.prompts}  # its share: 2 of the 4 slots


class FlagsOne:
    """A verifier stub that finds ``worker_id``'s groups fabricated."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def check(self, batch):
        flagged = any(g.worker_id == self.worker_id for g in batch)
        return AuditResult(suspects={self.worker_id: "fabricated"} if flagged else {}, unauditable=[])


class CannotAudit:
    """A verifier stub that has lost the version of ``worker_id``'s groups (as after a restart)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def check(self, batch):
        return AuditResult(suspects={}, unauditable=[g for g in batch if g.worker_id == self.worker_id])


def batch_with_a_suspect(name: str, verifier: type):
    """A learner batch of 4 drawn from 2 groups of worker ``name`` and 4 of an honest one, through
    the loop's :meth:`_verified_batch` with ``verifier(name's id)`` as its verifier."""
    from types import SimpleNamespace

    from echo2.learner.loop import LearnerLoop

    state = make_state(staleness=1, groups_per_step=4)
    suspect, honest = state.members.register(name), state.members.register("honest")
    suspect.proven = honest.proven = True  # both past their trial of one group per lease (echo2.core.shares)
    submit_all(state, suspect, state.work.lease(suspect, worker_version=0, max_groups=2, wait_s=0))
    submit_all(state, honest, state.work.lease(honest, worker_version=0, max_groups=4, wait_s=0))
    loop = SimpleNamespace(state=state, verifier=verifier(suspect.worker_id), _taken_this_step=False,
                           config=SimpleNamespace(coordinator=SimpleNamespace(data_timeout_s=5)))
    loop._take = lambda step, count: LearnerLoop._take(loop, step, count)
    return state, suspect, honest, LearnerLoop._verified_batch(loop, step=0, count=4)


def test_a_batch_cut_by_a_quarantine_is_topped_up_to_a_full_step():
    """A step trains B groups even when a suspect's groups are cut from it; a short step would
    leave the lease window (which counts B per step) wider for the rest of the run."""
    state, liar, honest, batch = batch_with_a_suspect("liar", FlagsOne)
    assert len(batch) == 4 and {g.worker_id for g in batch} == {honest.worker_id}
    assert state.registry.workers[liar.worker_id].quarantined
    # the window counts what is outstanding: 4 trained + 2 re-queued prompts' slots freed -> (S+1)*B - 4 grantable
    again = state.work.lease(honest, worker_version=0, max_groups=100, wait_s=0)
    assert len(again.prompts) == 4


def test_unauditable_groups_are_left_out_their_prompts_requeued_and_counted():
    state, claimant, honest, batch = batch_with_a_suspect("claims-a-lost-version", CannotAudit)
    assert {g.worker_id for g in batch} == {honest.worker_id}  # none trained unaudited
    assert not state.registry.workers[claimant.worker_id].quarantined  # an honest worker may have sampled it
    report = state.reliability()
    assert report["groups_discarded_unauditable"] == 2 and report["prompts_unaccounted"] == 0
    assert report["prompts_requeued"] >= 2


def test_an_episode_spanning_two_versions_is_audited_turn_by_turn(shipped):
    """Turn 1 sampled at v4, turn 2 at v5 (weights swapped between turns): each turn is checked
    against its own version, inserted tokens not at all; a turn whose log-probs are another
    version's than it claims is caught."""
    from echo2.model.episodes import observation_ids, run_episodes

    old, new, tokenizer = shipped
    verifier = learner_at_v5(shipped)
    def play(turn_models):
        picks = iter(turn_models)
        return run_episodes([tokenizer(EXAMPLE.prompt)["input_ids"]] * 4, draws=Draws.seeded(0, 4),
                            sample=lambda contexts, draws: sample(next(picks), contexts, max_new_tokens=6,
                                                                  eos_id=tokenizer.eos_token_id,
                                                                  pad_id=tokenizer.pad_token_id, draws=draws),
                            respond=lambda rows, replies: ["+="] * len(rows),
                            encode=lambda text: observation_ids(tokenizer, text),
                            decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                            max_turns=2, version=lambda: 0)

    def group(episodes, worker_id):
        return Group(slot=0, example=EXAMPLE, version=4, worker_id=worker_id, rewards=[0.0] * 4,
                     token_ids=[e.token_ids for e in episodes], logprobs=[e.logprobs for e in episodes],
                     masks=[e.mask for e in episodes], turn_versions=[[4, 5]] * 4)

    honest = group(play([old, new]), "honest")
    assert all(0 in m for m in honest.masks)  # feedback was inserted
    stale_second_turn = group(play([old, old]), "claims-v5-for-v4")  # turn 2 sampled at v4, claimed v5
    suspects = verifier.check([honest, stale_second_turn]).suspects
    assert set(suspects) == {"claims-v5-for-v4"} and "v5" in suspects["claims-v5-for-v4"]
    assert verifier.pop_metrics()["audited_groups"] == 2


@pytest.mark.parametrize("staleness", [0, 2])
def test_the_learner_keeps_the_versions_of_the_whole_window_for_its_audits(shipped, tmp_path, staleness):
    """S + 1 versions: every version a group still fresh for the learner's step can claim (one
    fewer, and a claim of the window's oldest version could not be audited: the 'claim an older
    version' attack)."""
    from types import SimpleNamespace

    from echo2.config import load_config
    from echo2.core.staleness import is_fresh
    from echo2.learner.loop import LearnerLoop

    old, _, tokenizer = shipped
    config = load_config(overrides=[f"staleness={staleness}", "telemetry.progress=false"])
    loop = LearnerLoop(config, state=None, publisher=SimpleNamespace(kind="full"),
                       learner=SimpleNamespace(policy=old, tokenizer=tokenizer), task=None, eval_examples=[],
                       run_dir=tmp_path, metrics=None, timeline=None)
    claimable = [v for v in range(10) if is_fresh(9, v, staleness)]
    assert loop.verifier.versions.keep == len(claimable) == staleness + 1


def test_an_agents_group_answers_for_each_of_its_workers_apart(shipped):
    """An agent's episode whose calls two workers sampled (:mod:`echo2.gateway`), its segment's own
    prompt ids given: only the worker whose log-probs are off is a suspect, the other's turns pass."""
    from echo2.model.episodes import observation_ids, run_episodes, segments

    _, new, tokenizer = shipped
    verifier = learner_at_v5(shipped)
    prompt = tokenizer(EXAMPLE.prompt)["input_ids"]
    episodes = run_episodes([prompt] * 2, draws=Draws.seeded(0, 2), sample=lambda contexts, draws: sample(
        new, contexts, max_new_tokens=6, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
        draws=draws), respond=lambda rows, replies: ["+="] * len(rows),
        encode=lambda text: observation_ids(tokenizer, text),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True), max_turns=2, version=lambda: 5)
    for episode in episodes:  # the liar's turn (the second): reported 1 nat off what it sampled with
        start, end, _ = [run for run in segments(episode.mask) if run[2]][1]
        episode.logprobs[start:end] = [lp - 1.0 for lp in episode.logprobs[start:end]]
    group = Group(slot=0, example=Example("not the prompt", "40"), version=5, worker_id="honest", rewards=[0.0, 1.0],
                  token_ids=[e.token_ids for e in episodes], logprobs=[e.logprobs for e in episodes],
                  masks=[e.mask for e in episodes], turn_versions=[[5, 5]] * 2, prompt_ids=[prompt] * 2,
                  episodes=[0, 1], turn_workers=[["honest", "liar"]] * 2)
    assert all(0 in m for m in group.masks)
    suspects = verifier.check([group]).suspects
    assert set(suspects) == {"liar"}
    assert group.workers() == ["honest", "liar"]


class SwapAfter:
    """In-flight updates for a test: ``live`` holds v4 and takes ``new``'s weights (v5) after ``steps`` steps."""

    def __init__(self, live, new, steps: int) -> None:
        self.live, self.new, self.left, self.version = live, new, steps, 4

    def held(self) -> int:
        return self.version

    def between_steps(self) -> int:
        self.left -= 1
        if self.left == 0:
            self.live.load_state_dict(self.new.state_dict())
            self.version = 5
        return self.version


def test_a_sequence_spanning_two_versions_is_audited_span_by_span(shipped):
    """Weights updated between two decoding steps (an in-flight update): the tokens before the
    switch are audited at v4, those after at v5; a worker whose log-probs are off in one span only
    is caught, and so is one that claims a switch that never happened."""
    from echo2.rollout.lease_generation import episode_of

    old, new, tokenizer = shipped
    verifier = learner_at_v5(shipped)
    prompt = tokenizer(EXAMPLE.prompt)["input_ids"]
    live = copy.deepcopy(old)
    samples = sample(live, [prompt] * 4, max_new_tokens=12, eos_id=-1, pad_id=tokenizer.pad_token_id,
                     draws=Draws.seeded(0, 4), updates=SwapAfter(live, new, steps=5))
    # five steps at v4; then v5's weights, its cache recomputed: the sixth token is v5's
    assert all(versions == [4] * 5 + [5] * 7 for versions in samples.versions)

    def group(episodes, worker_id):
        return Group(slot=0, example=EXAMPLE, version=4, worker_id=worker_id, rewards=[0.0] * 4,
                     token_ids=[e.token_ids for e in episodes], logprobs=[e.logprobs for e in episodes],
                     switches=[e.switches for e in episodes])

    honest = [episode_of(t, lp, v) for t, lp, v in zip(samples.completion_ids, samples.logprobs, samples.versions)]
    assert all(e.switches == [(5, 5)] for e in honest) and group(honest, "honest").versions() == [4, 5]
    lying = copy.deepcopy(honest)
    for episode in lying:  # the v5 span reported 1 nat off
        episode.logprobs[5:] = [lp - 1.0 for lp in episode.logprobs[5:]]
    unswitched = sample(old, [prompt] * 4, max_new_tokens=12, eos_id=-1, pad_id=tokenizer.pad_token_id,
                        draws=Draws.seeded(1, 4))
    claimed = [episode_of(t, lp, [4] * 5 + [5] * 7) for t, lp in zip(unswitched.completion_ids, unswitched.logprobs)]
    suspects = verifier.check([group(honest, "honest"), group(lying, "off-in-v5"),
                               group(claimed, "claims-a-switch")]).suspects
    assert set(suspects) == {"off-in-v5", "claims-a-switch"} and all("v5" in why for why in suspects.values())
