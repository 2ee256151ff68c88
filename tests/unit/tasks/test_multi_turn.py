"""Episodes through the coordinator: the environment answers between turns, a submission's inserted
tokens must be those answers, each turn's version is recorded and staleness counts from the
oldest; the learner trains only the model's tokens; a multi-turn run end to end."""

from __future__ import annotations

import pytest
from state_support import EOS, encode, make_state, publish

from echo2.coordinator.records import Rejected
from echo2.exchange import Group
from echo2.protocol import Completion, GroupResult, RespondItem, RespondRequest, SubmitRequest
from echo2.tasks import Example
from echo2.tasks.retry import RetryArithmeticTask


def turns(*parts: str, versions: list[int]) -> Completion:
    """An episode from alternating replies and inserted answers: ``turns("5", "+=", "7", versions=[0, 1])``."""
    ids, mask = [], []
    for index, text in enumerate(parts):
        own = index % 2 == 0
        piece = encode(text) + ([EOS] if own else [])
        ids += piece
        mask += [int(own)] * len(piece)
    return Completion(token_ids=ids, logprobs=[-0.1 if m else 0.0 for m in mask], mask=mask, turn_versions=versions)


def ask(state, worker, lease, *replies: list[str]):
    items = [RespondItem(slot=lease.prompts[0].slot, replies=said) for said in replies]
    return state.work.respond(worker, RespondRequest(lease_id=lease.lease_id, items=items)).observations


def submission(lease, *completions):
    return SubmitRequest(lease_id=lease.lease_id, version=lease.version, generate_seconds=0.1,
                         groups=[GroupResult(slot=lease.prompts[0].slot, completions=list(completions))])


@pytest.fixture()
def playing():
    """A coordinator running the retry task (3 answers, S = 1), a worker and its one-prompt lease."""
    state = make_state(staleness=1, task=RetryArithmeticTask(max_turns=3))
    worker = state.members.register("w")
    lease = state.work.lease(worker, 0, 1, wait_s=0)
    truth = int(lease.prompts[0].prompt.split("+")[0])
    return state, worker, lease, truth


def test_the_environment_answers_and_the_episode_is_scored_on_what_it_answered(playing):
    state, worker, lease, truth = playing
    assert ask(state, worker, lease, [str(truth + 1)], [str(truth)]) == ["-=", None]
    publish(state, 1)  # the worker swaps weights between its turns
    episode = turns(str(truth + 1), "-=", str(truth), versions=[0, 1])
    assert state.work.submit(worker, submission(lease, episode, turns(str(truth), versions=[0]))).accepted == 1
    group, = state.take_batch(1, timeout_s=1, count=1)
    assert group.rewards == [pytest.approx(0.7), 1.0]  # solved at the second answer, at the first
    assert group.turn_versions == [[0, 1], [0]] and group.version == 0
    assert group.masks == [[1, 1, 0, 0, 1, 1], [1, 1]]
    assert group.versions() == [0, 1] and group.mask_at(0, 1) == [0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize(("episode", "why"), [
    (lambda t: turns(str(t + 1), "+=", str(t), versions=[0, 0]), "not what the environment answered"),  # forged
    (lambda t: turns(str(t + 2), "-=", str(t), versions=[0, 0]), "not what the environment answered"),  # never asked
])
def test_inserted_tokens_that_are_not_the_environments_answer_are_refused(playing, episode, why):
    state, worker, lease, truth = playing
    ask(state, worker, lease, [str(truth + 1)])
    with pytest.raises(Rejected) as refused:
        state.work.submit(worker, submission(lease, episode(truth), episode(truth)))
    assert refused.value.code == "unscorable" and why in refused.value.reason
    assert len(state.books.ledger) == 0


@pytest.mark.parametrize(("versions", "what"), [([1, 1], "must start at the lease's v0"), ([0, 3], "not pass v1"),
                                                ([0], "2 model turns"), (None, "must give turn_versions")])
def test_each_turns_version_is_checked(playing, versions, what):
    state, worker, lease, truth = playing
    ask(state, worker, lease, [str(truth + 1)])
    publish(state, 1)
    episode = turns(str(truth + 1), "-=", str(truth), versions=[0, 1]).model_copy(update={"turn_versions": versions})
    with pytest.raises(Rejected) as refused:
        state.work.submit(worker, submission(lease, episode, episode))
    assert refused.value.code == "bad_version" and what in refused.value.reason


def test_staleness_counts_from_the_oldest_turn(playing):
    state, worker, lease, truth = playing
    ask(state, worker, lease, [str(truth + 1)])
    publish(state, 1)
    publish(state, 2)
    episode = turns(str(truth + 1), "-=", str(truth), versions=[0, 2])  # its last turn is fresh, its first is not
    state.work.submit(worker, submission(lease, episode, episode))
    with pytest.raises(TimeoutError):
        state.take_batch(2, timeout_s=0.3, count=1)  # S = 1: a v0 group is too old for step 2
    assert state.books.ledger.dropped_stale == 1


def test_respond_is_only_for_the_workers_own_playing_lease_and_within_the_turn_limit(playing):
    state, worker, lease, truth = playing
    other = state.members.register("other")
    with pytest.raises(Rejected) as foreign:
        ask(state, other, lease, ["1"])
    assert foreign.value.status == 404
    with pytest.raises(Rejected) as too_many:
        ask(state, worker, lease, ["1", "2", "3"])
    assert too_many.value.code == "too_many_turns"
    state.work.submit(worker, submission(lease, turns(str(truth), versions=[0]), turns(str(truth), versions=[0])))
    with pytest.raises(Rejected) as done:
        ask(state, worker, lease, ["1"])
    assert done.value.status == 409


def test_the_learner_trains_only_the_models_tokens(monkeypatch):
    from echo2.config import load_config
    from echo2.learner import trainer
    from echo2.model.loading import SHIPPED_MODEL, load_model, load_tokenizer

    config = load_config(overrides=["learner.groups_per_step=1", "rollout.group_size=2"])
    tokenizer = load_tokenizer(SHIPPED_MODEL)
    learner = trainer.Learner(load_model(SHIPPED_MODEL), tokenizer, config.learner, config.rollout)
    seen = []
    real = trainer.objective_loss
    monkeypatch.setattr(trainer, "objective_loss", lambda batch, *a: seen.append(batch.mask.clone()) or real(batch, *a))
    ids = [tokenizer.convert_tokens_to_ids(c) for c in "5"] + [tokenizer.eos_token_id]
    inserted = [tokenizer.convert_tokens_to_ids(c) for c in "+="]
    episode = ids + inserted + ids
    group = Group(slot=0, example=Example("2+3=", "5"), version=0, worker_id="w", token_ids=[episode, ids],
                  logprobs=[[-1.0] * len(episode), [-1.0] * len(ids)], rewards=[0.0, 1.0],
                  masks=[[1, 1, 0, 0, 1, 1], [1, 1]], turn_versions=[[0, 0], [0]])
    learner.step([group], version=0)
    assert seen and seen[0].tolist() == [[1, 1, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0]]


def test_the_environment_answers_only_the_turns_of_the_leases_episodes(playing):
    """A worker that treats the retry environment as an answer oracle (made-up replies, read the
    higher/lower feedback, ask again) is refused past its episodes: 9-10 such queries had found a
    prompt's secret answer within a lease's budget of 16, 8 of 8 times."""
    state, worker, lease, truth = playing
    assert ask(state, worker, lease, [str(truth + 10)], [str(truth + 20)]) == ["-=", "-="]  # G = 2 episodes begun
    with pytest.raises(Rejected) as third:
        ask(state, worker, lease, [str(truth - 10)])  # a third first reply: no such episode
    assert third.value.code == "not_a_transcript" and "2 episodes" in third.value.reason
    with pytest.raises(Rejected) as unanswered:
        ask(state, worker, lease, [str(truth - 5), str(truth - 2)])  # a turn after one never answered
    assert unanswered.value.code == "not_a_transcript"
    assert ask(state, worker, lease, [str(truth + 10)]) == ["-="]  # asked again (a lost answer): the same
    assert ask(state, worker, lease, [str(truth + 10), str(truth - 3)]) == ["+="]  # the episode goes on
    with pytest.raises(Rejected) as too_many:
        ask(state, worker, lease, [str(truth + 10), str(truth - 3), str(truth)])
    assert too_many.value.code == "too_many_turns"
    assert state.reliability()["groups_rejected"] == {"not_a_transcript": 2, "too_many_turns": 1}
    with pytest.raises(ValueError, match="65536"):
        RespondItem(slot=0, replies=["1" * 70_000])


def test_a_submission_must_hold_every_turn_the_environment_answered(playing):
    """Probing episodes cannot be asked and then left out: what the environment answered is in
    the group that is scored and trained, or the submission is refused."""
    state, worker, lease, truth = playing
    ask(state, worker, lease, [str(truth + 10)], [str(truth)])
    ask(state, worker, lease, [str(truth + 10), str(truth + 5)])  # episode 1 probes on
    shown = turns(str(truth + 10), "-=", str(truth), versions=[0, 0])  # but shows only its first answer
    with pytest.raises(Rejected) as refused:
        state.work.submit(worker, submission(lease, shown, turns(str(truth), versions=[0])))
    assert refused.value.code == "unscorable" and "in no submitted episode" in refused.value.reason
