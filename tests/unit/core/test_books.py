"""One set of books (:class:`echo2.core.books.Books`) for the coordinator and the simulator: the
same sequence of grants, submissions, expiries, batches, publishes and a re-plan, driven through
the coordinator's requests and through the simulator's moves, leaves the same books; so do the
other kinds of work: a sampling request leased and answered (a service's client's), an agent's
group opened, played and admitted, and one abandoned (its prompt first in line again)."""

import pytest
from state_support import make_state, publish, submit_all

from echo2.core.books import Books, Counters
from echo2.core.leasing import LeaseAnswer
from echo2.core.profiling import LeaseCycle
from echo2.core.sample_queue import SampleWork
from echo2.core.shares import SharePolicy
from echo2.gateway.episodes import EpisodeBook
from echo2.gateway.render import Held
from echo2.gateway.trajectory import Call
from echo2.planning.activation_rule import ActivationPolicy, replan
from echo2.protocol import SampledSequence, SampleResult, SubmitRequest, leased_sample
from echo2.simulation.engine import Simulation
from echo2.simulation.scenario import parse_scenario

STALENESS, GROUPS_PER_STEP = 1, 2


def digest(books: Books, workers: list) -> dict:
    """What the two sides must agree on, with workers by their order of joining (ids and times differ)."""
    ledger, index = books.ledger, {w.worker_id: n for n, w in enumerate(workers)}
    return {
        "version": books.version, "useful_slots": ledger.useful_slots, "next_slot": ledger.next_slot,
        "requeued": len(ledger.requeued), "in_flight": sorted(ledger.in_flight), "lent": sorted(ledger.lent),
        "buffer": sorted((entry[0], entry[1]) for entry in ledger._buffer), "dropped_stale": ledger.dropped_stale,
        "leases": sorted((index[lease.worker_id], lease.version, sorted(lease.slots)) for lease in books.active_leases()),
        "counters": {name: getattr(books.counters, name) for name in
                     ("leases_issued", "leases_completed", "leases_expired", "groups_accepted", "groups_trained")},
        "workers": [(w.proven, w.unfulfilled, w.groups_delivered, w.active, w.parked_until > 0) for w in workers],
        "in_training": len(books.in_training), "samples_waiting": len(books.samples),
        "kinds": sorted(lease.kind for lease in books.active_leases()),
    }


def play(side) -> list[dict]:
    """The sequence, on either side; the books' digest after each move."""
    a, b = side.join("a"), side.join("b")
    seen = []
    lease_a = side.ask(a, 0)  # nobody has delivered yet: no probation, a share each
    lease_b = side.ask(b, 0)
    seen.append(side.digest())
    side.submit(a, lease_a)
    side.train(0)  # the simulated learner takes a batch the moment there is one: so does this one
    seen.append(side.digest())
    side.overdue(lease_b)  # b's miss: on trial, so parked at once; its prompts back first in line
    seen.append(side.digest())
    side.publish(1)  # a delivered: proven
    seen.append(side.digest())
    assert side.ask(b, 1) is None  # parked
    lease_a = side.ask(a, 1)  # the re-queued prompts first
    side.submit(a, lease_a)
    side.train(1)
    side.publish(2)
    side.replan()
    seen.append(side.digest())
    return seen


def play_other_work(side) -> list[dict]:
    """A sampling request and an agent's groups beside the task's prompts, on either side."""
    a, b = side.join("a"), side.join("b")
    side.queue_sample("r0")  # a client's request: served before prompts
    sample = side.ask(a, 0)
    lease_b = side.ask(b, 0)  # nothing else waits: prompts
    seen = [side.digest()]
    side.submit_sample(a, sample)
    seen.append(side.digest())
    side.agent_group(a)  # opened at the newest version, its episodes played by a, admitted
    seen.append(side.digest())
    side.abandoned_group()  # opened, then the agent gave up: its prompt first in line again
    seen.append(side.digest())
    side.submit(b, lease_b)
    side.train(0)
    seen.append(side.digest())
    return seen


class Requests:
    """A work source that keeps the request ids answered (a training service's desk, to the books)."""

    name = "requests"

    def __init__(self) -> None:
        self.answered: list[str] = []

    def results(self, worker_id, lease, results):
        self.answered += [lease.slots[result.slot].request_id for result in results]

    def refused(self, work, why):
        raise AssertionError(f"{work.request_id}: {why}")

    def reap(self):
        pass

    def report(self):
        return {}


def sample_work(request_id: str) -> SampleWork:
    leased = leased_sample(slot=0, sampler="", prompt_ids=[1, 2, 3], num_samples=2, max_tokens=2, temperature=1.0)
    return SampleWork(request_id, min_version=0, rows=2, request=leased, source=Requests.name)


class Live:
    """The sequence through the coordinator's requests (and the gateway's episodes' books)."""

    def __init__(self) -> None:
        self.requests = Requests()
        self.state = make_state(staleness=STALENESS, groups_per_step=GROUPS_PER_STEP, sources=[self.requests])
        self.records = []
        self.episodes = EpisodeBook(self.state.parts, group_size=2, episode_timeout_s=60)

    def queue_sample(self, request_id):
        self.state.queue_samples([sample_work(request_id)])

    def submit_sample(self, record, lease):
        results = [SampleResult(slot=leased.slot, sequences=[
            SampledSequence(token_ids=[4], logprobs=[-0.5], stop_reason="stop")] * leased.num_samples)
            for leased in lease.samples]
        self.state.work.submit(record, SubmitRequest(lease_id=lease.lease_id, version=0, samples=results,
                                                     generate_seconds=0.1))
        assert self.requests.answered == ["r0"]

    def agent_group(self, record):
        first, second = self.episodes.claim(0.1), self.episodes.claim(0.1)
        for episode, tokens in ((first, [4]), (second, [5])):
            call = Call(f"c{episode.episode_id}", [1, 2, 3], tokens, [-0.5], version=self.state.version)
            self.episodes.record(episode, call, record.worker_id, Held([{"role": "user", "content": "q"}],
                                                                        [1, 2, 3, *tokens], True))
            self.episodes.reward(episode.episode_id, 1.0)

    def abandoned_group(self):
        episode = self.episodes.claim(0.1)
        self.episodes.give_up(episode.episode_id, "the agent raised")

    def join(self, name):
        record = self.state.members.register(name)
        self.records.append(record)
        return record

    def ask(self, record, version):
        response = self.state.work.lease(record, version, 8, wait_s=0)
        return response if response.status == "granted" else None

    def submit(self, record, lease):
        submit_all(self.state, record, lease)

    def overdue(self, lease):
        self.state.leases.get(lease.lease_id).deadline = 0
        self.state.members.reap()

    def train(self, step):
        self.state.take_batch(step, timeout_s=1)

    def publish(self, version):
        publish(self.state, version)

    def replan(self):
        self.state.parts.replan("test")

    def digest(self):
        return digest(self.state.books, self.records)


class Simulated:
    """The sequence through the simulator's coordinator moves (its event queue never run: only
    the moves asked for here happen, a simulated second apart)."""

    def __init__(self) -> None:
        self.sim = Simulation(parse_scenario({
            "name": "books", "model": {"name": "m", "parameters_b": 0.005, "payload_gb": 0.01},
            "learner": {"train_step_s": 1.0},
            "recipe": {"staleness": STALENESS, "run": {"steps": 100}, "learner": {"groups_per_step": GROUPS_PER_STEP},
                       "rollout": {"group_size": 2, "groups_per_lease": 8},
                       "coordinator": {"lease_timeout_s": 60, "window_share": 0.5}},
            "fleet": [{"name": "w", "count": 2, "rollouts_per_s": 1.0}]}))
        self.state = self.sim.state
        self.joined = []

    def join(self, name):
        worker = self.state.workers[len(self.joined)]
        worker.alive = worker.running = worker.active = True
        self.state.running[worker.worker_id] = worker
        self.joined.append(worker)
        return worker

    def ask(self, worker, version):
        self.state.queue.now += 1.0
        answer = self.sim._lease_answer(worker, version)
        if answer.status != "granted":
            return None
        self.sim._answer(worker, answer, version)
        return worker.leases[-1]

    def submit(self, worker, lease):
        self.state.queue.now += 1.0
        self.sim._submitted(worker, worker.epoch, lease)  # the learner takes nothing yet: the batch is short

    def overdue(self, lease):
        self.state.queue.now += 1.0
        self.sim._overdue(lease)

    def queue_sample(self, request_id):
        self.sim.queue_samples([sample_work(request_id)])

    def submit_sample(self, worker, lease):
        self.submit(worker, lease)

    def agent_group(self, worker):
        books = self.state.books
        (slot, _), version = books.open_group(lambda: None), books.version
        books.admit_group(slot, version, (version, worker))

    def abandoned_group(self):
        slot, _ = self.state.books.open_group(lambda: None)
        self.state.books.drop_group(slot)

    def train(self, step):
        assert self.state.step == step
        if not self.state.learner_busy:
            self.sim._learner_try()
        assert self.state.learner_busy  # the simulated learner takes its batch as soon as it is there

    def publish(self, version):
        self.state.queue.now += 1.0
        self.sim._learner_done(list(self.state.books.in_training), started=0.0)
        assert self.state.books.version == version

    def replan(self):
        self.sim._decide()

    def digest(self):
        return digest(self.state.books, self.joined)


def test_the_coordinator_and_the_simulator_keep_the_same_books():
    live, simulated = play(Live()), play(Simulated())
    assert live == simulated
    assert live[2]["workers"][1] == (False, 1, 0, True, True)  # b missed on trial: parked
    assert live[2]["requeued"] == 2 and live[2]["in_training"] == 2
    assert live[3]["workers"][0][:3] == (True, 0, 2)  # a's two groups trained: proven
    assert live[-1]["counters"] == {"leases_issued": 3, "leases_completed": 2, "leases_expired": 1,
                                    "groups_accepted": 4, "groups_trained": 4}


def test_sampling_work_and_agent_groups_keep_the_same_books_on_both_sides():
    live, simulated = play_other_work(Live()), play_other_work(Simulated())
    assert live == simulated
    assert live[0]["kinds"] == ["prompt", "sample"] and live[0]["samples_waiting"] == 0
    assert live[0]["in_flight"] == [0, 1]  # the request took no prompt slot
    assert live[1]["kinds"] == ["prompt"] and live[1]["counters"]["leases_completed"] == 1
    assert live[1]["counters"]["groups_accepted"] == 0  # an answered request is no group
    assert live[2]["buffer"] == [(0, 2)] and live[2]["counters"]["groups_accepted"] == 1  # the agent's group
    assert live[3]["requeued"] == 1 and live[3]["next_slot"] == 4  # the abandoned group's prompt, first in line
    assert live[4]["counters"]["groups_trained"] == 2 and live[4]["buffer"] == [(0, 2)]


class Worker:
    """A worker as the books read it."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id, self.active, self.quarantined, self.at_work = worker_id, True, False, True
        self.throughput, self.unfulfilled, self.parked_until, self.proven, self.groups_delivered = None, 0, 0.0, False, 0
        self.price_per_hour, self.parked_at, self.cycle = 0.0, None, LeaseCycle()


def clock_free_books() -> tuple[Books, dict[str, Worker]]:
    workers = {name: Worker(name) for name in ("a", "b")}
    books = Books(workers, lambda group: group, staleness=1, groups_per_step=2, group_size=2,
                  shares=SharePolicy(groups_per_lease=2, window_share=0.5), lease_timeout_s=10, replan_every=1)
    return books, workers


def test_an_expiry_is_counted_once_and_an_overdue_lease_found_by_the_time_given():
    books, workers = clock_free_books()
    lease = books.grant(workers["a"], 0, LeaseAnswer("granted", 2, deadline_s=10), now=100.0, draw=lambda: "p")
    assert books.overdue(109.0) == [] and books.overdue(111.0) == [lease]
    assert books.active_leases("a") == [lease] and books.active_leases("b") == []
    books.expire(lease, 111.0, missed_deadline=True)
    books.expire(lease, 112.0, missed_deadline=True)
    assert books.counters.leases_expired == 1 and workers["a"].unfulfilled == 1
    assert list(books.ledger.requeued) == ["p", "p"] and books.active_leases() == []


def test_the_census_keeps_a_workers_newest_load_and_waits_only_for_workers_at_work():
    books, workers = clock_free_books()
    books.hold(workers["b"], 0, at=0.5)
    books.published(1, now=1.0, at=1.0)
    assert books.hold(workers["a"], 1, at=3.0) == []  # b still holds 0
    books.hold(workers["a"], 0, at=2.5)  # a late report of an older load
    assert books.census.holding["a"] == 1
    workers["b"].at_work = False  # parked: no version waits for it
    assert [(r.version, r.reached) for r in books.hold(workers["b"], 0, at=4.0)] == [(1, 4.0)]
    assert books.time_dissemination() == [3.0] and books.clock.broadcast_s == 3.0 and books.time_dissemination() == []


def test_counters_restored_from_a_snapshot_refuse_a_name_they_do_not_keep():
    counters = Counters(leases_issued=2)
    counters.add({"leases_issued": 3, "groups_trained": 1})
    assert counters.leases_issued == 5 and counters.as_dict()["groups_trained"] == 1
    with pytest.raises(ValueError, match="leases_issud"):
        counters.add({"leases_issud": 1})


def test_a_replan_is_one_rule_over_the_books_clock_and_census():
    books, workers = clock_free_books()
    policy = ActivationPolicy(enabled=False, rollouts_per_step=4, staleness=1)
    workers["b"].active = False
    decision, changed = replan(policy, list(workers.values()), books.clock, books.census, now=5.0)
    assert decision.active == {"a", "b"} and changed == [workers["b"]] and workers["b"].active
