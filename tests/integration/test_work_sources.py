"""A kind of work of the user's own is one work source (:mod:`echo2.coordinator.sources`): the one
below, written here and nowhere in ``echo2``, scores candidate answers by their log-probs on the
fleet (a reward model's job, say). It queues its requests on a real coordinator, a real worker
leases and samples them, and its results come back to it, routed by its name; another source's
results do not."""

import threading

from waiting import wait_for

from echo2.broadcast.publisher import Publisher
from echo2.broadcast.topology import star_plan
from echo2.config import load_config
from echo2.coordinator.app import create_app
from echo2.coordinator.records import Limits
from echo2.coordinator.server import CoordinatorServer
from echo2.core.sample_queue import SampleWork
from echo2.launch.coordinator import build_coordinator
from echo2.launch.train import run_spec
from echo2.model.loading import load_model, load_tokenizer
from echo2.protocol import leased_sample
from echo2.rollout.worker import RolloutWorker

TOKEN = "a-run-token-of-32-characters-----"


class CandidateScores:
    """Asks the fleet for each candidate's prompt log-probs (one token sampled, unused)."""

    name = "candidate-scores"

    def __init__(self) -> None:
        self.scores: dict[str, list[float]] = {}
        self.reaped = 0

    def ask(self, request_id: str, candidate_ids: list[int]) -> SampleWork:
        leased = leased_sample(slot=0, sampler="", prompt_ids=candidate_ids, num_samples=1, max_tokens=1,
                               temperature=1.0, prompt_logprobs=True)
        return SampleWork(request_id, min_version=0, rows=1, request=leased, source=self.name)

    def results(self, worker_id, lease, results):
        for result in results:
            self.scores[lease.slots[result.slot].request_id] = result.prompt_logprobs

    def refused(self, work, why):
        raise AssertionError(f"{work.request_id} refused: {why}")

    def reap(self):
        self.reaped += 1

    def report(self):
        return {"candidates_scored": len(self.scores)}


class Bystander(CandidateScores):
    name = "bystander"


def test_a_work_source_of_ones_own_is_served_by_a_real_worker_and_gets_its_own_results_back():
    config = load_config(overrides=["rollout.max_new_tokens=4"])
    spec = run_spec(config).model_copy(update={"agent_calls": True})  # leases carry requests, the run's own weights
    model, tokenizer = load_model(spec.model), load_tokenizer(spec.model)
    scores, bystander = CandidateScores(), Bystander()
    state = build_coordinator(config, spec, Limits(group_size=spec.group_size, max_new_tokens=4,
                                                   vocab_size=model.get_input_embeddings().num_embeddings),
                              run_token=TOKEN, planner=star_plan, training=None)  # as echo2 serve builds it
    for source in (scores, bystander):
        state.add_source(source)
    publisher = Publisher(config.broadcast, keep_versions=2, token=TOKEN)
    state.publish(publisher.publish(0, model))
    app = create_app(state, lease_wait_s=1.0)
    publisher.mount(app)
    server = CoordinatorServer(app, "127.0.0.1", 0)
    server.start(10)
    worker = RolloutWorker(server.url, TOKEN, name="fleet-1", relay=None, give_up_after_s=30)
    working = threading.Thread(target=worker.run, daemon=True)
    try:
        working.start()
        candidates = {"right": tokenizer("12+34=46")["input_ids"], "wrong": tokenizer("12+34=99")["input_ids"]}
        state.queue_samples([scores.ask(name, ids) for name, ids in candidates.items()])
        wait_for(lambda: len(scores.scores) == 2, 120, "the fleet to score both candidates")
        state.members.reap()
    finally:
        state.finish()
        working.join(60)
        server.stop()
        publisher.close()
    assert not working.is_alive()
    assert {name: len(ids) - 1 for name, ids in candidates.items()} == {k: len(v) for k, v in scores.scores.items()}
    assert all(logprob <= 0 for values in scores.scores.values() for logprob in values)
    assert scores.scores["right"] != scores.scores["wrong"]  # the candidates' own tokens were scored
    assert bystander.scores == {} and scores.reaped >= 1 and bystander.reaped >= 1  # routed by name; every one reaped
    assert state.reliability()["candidate-scores"] == {"candidates_scored": 2}
