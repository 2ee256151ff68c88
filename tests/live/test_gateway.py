"""The agent gateway with real clients on loopback: ``echo2 train`` with ``task.name=agent:...`` on
SmolLM2-135M-Instruct, two local workers, its agents written with the ``openai`` SDK and the OpenAI
Agents SDK (:mod:`gateway_agents`), and one agent in the test itself playing through
``POST /rl/episodes`` as another program would.

What the run records on the way (the workers' answers as they reach the coordinator, the groups the
learner trains) is checked against itself: every trained model token is one the workers sampled,
with its log-prob; a rewritten history is a segment of its own; a retried call is trained once; a
worker whose log-probs are off (``local-1``'s answers are shifted on their way in, as a lying worker
would send them) is caught by the audit and none of its calls is trained.
"""

import json
import threading

import httpx
import openai
import pytest
from gateway_agents import MARKERS
from waiting import wait_for

from echo2.config import load_config
from echo2.exchange import Group
from echo2.launch.agents import AgentRun
from echo2.launch.train import run_training
from echo2.learner.trainer import Learner
from echo2.model.episodes import segments

LIE_NATS = 0.7
"""What ``local-1`` takes off each log-prob it reports (the audit's tolerance is far below)."""


class Recorded:
    def __init__(self) -> None:
        self.sampled: dict[str, tuple[str, list[int], list[float]]] = {}
        """Call id -> the worker's name and the tokens and log-probs it reported."""
        self.trained: list[Group] = []
        self.agents: list[AgentRun] = []
        self.external: dict = {}


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agent-run")
    recorded, patch = Recorded(), pytest.MonkeyPatch()
    attach, results, step = AgentRun.attach, AgentRun.results, Learner.step

    def attaching(self, *args):
        recorded.agents.append(self)
        return attach(self, *args)

    def arriving(self, worker_id, lease, answers):
        name = self.desk.state.registry.workers[worker_id].name
        if name == "local-1":  # a lying worker: what it reports is not what it sampled with
            answers = [a.model_copy(update={"sequences": [s.model_copy(update={
                "logprobs": [lp - LIE_NATS for lp in s.logprobs]}) for s in a.sequences]}) for a in answers]
        for answer in answers:
            sequence = answer.sequences[0]
            recorded.sampled[lease.slots[answer.slot].request_id] = (name, sequence.token_ids, sequence.logprobs)
        return results(self, worker_id, lease, answers)

    def stepping(self, groups, version, echo_groups=()):
        recorded.trained += groups
        return step(self, groups, version, echo_groups)

    patch.setattr(AgentRun, "attach", attaching)
    patch.setattr(AgentRun, "results", arriving)
    patch.setattr(Learner, "step", stepping)
    config = load_config(None, [
        "model.name=smollm2-135m-instruct", "model.dtype=bfloat16", "broadcast.dtype=bfloat16",
        "verification.logprob_tolerance=0.3", "task.name=agent:gateway_agents:scripted", "agent.examples=arithmetic",
        "agent.concurrency=2", "agent.episode_timeout_s=120", "workers.count=2", "rollout.group_size=2",
        "learner.groups_per_step=1", "run.steps=6", "rollout.max_new_tokens=64", "rollout.temperature=0.7",
        "eval.size=1", "eval.every=100", "protocol=sync", f"run.dir={folder}", "telemetry.progress=false"])
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("summary", run_training(config)), daemon=True)
    thread.start()
    try:
        address = wait_for_file(folder, "coordinator.json")
        recorded.external = play_externally(json.loads(address.read_text()))
    finally:  # the run ends by itself after its steps
        thread.join(timeout=900)
        patch.undo()
    assert not thread.is_alive(), "the agent run did not finish"
    assert "summary" in outcome
    return recorded


def wait_for_file(folder, name):
    found = []
    wait_for(lambda: found.extend(folder.glob(f"*/{name}")) or found, timeout_s=120, what=f"the run's {name}")
    return found[0]


def play_externally(coordinator: dict) -> dict:
    """An agent in another program: opens an episode over HTTP, plays two turns with the sync
    ``openai`` client, sets its reward (twice: a retried request is applied once)."""
    headers = {"X-Echo2-Token": coordinator["token"]}
    opened = httpx.post(f"{coordinator['url']}/rl/episodes", headers=headers, timeout=90)
    assert opened.status_code == 200, opened.text
    episode = opened.json()
    client = openai.OpenAI(base_url=episode["base_url"], api_key=episode["key"], max_retries=0)
    messages = [{"role": "system", "content": "Mode E. Answer in one short sentence."},
                {"role": "user", "content": f"What is {episode['example']['prompt']}"}]
    first = client.chat.completions.create(model="policy", messages=messages, max_tokens=64)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Are you sure?"}]
    client.chat.completions.create(model="policy", messages=messages, max_tokens=64)
    url = f"{coordinator['url']}/rl/episodes/{episode['episode_id']}/reward"
    rewarded = [httpx.post(url, headers=headers, json={"reward": 0.5}, timeout=30) for _ in range(2)]
    wrong_key = client.with_options(api_key="ep-not-a-key")
    with pytest.raises(openai.AuthenticationError):
        wrong_key.chat.completions.create(model="policy", messages=messages, max_tokens=4)
    with pytest.raises(openai.APIStatusError, match="over"):  # rewarded: it takes no more calls
        client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
    client.close()
    return {"statuses": [r.status_code for r in rewarded], "episode": episode["episode_id"]}


def model_turns(group: Group, row: int) -> list[tuple[list[int], list[float]]]:
    mask = group.model_mask(row)
    return [(group.token_ids[row][start:end], group.logprobs[row][start:end])
            for start, end, value in segments(mask) if value]


def marker_of(group: Group, row: int, decode) -> str | None:
    text = decode(group.prompt_ids[row])
    return next((kind for kind, marker in {**MARKERS, "external": "Mode E."}.items() if marker in text), None)


@pytest.fixture(scope="module")
def decode():
    from echo2.model.loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    return lambda ids: tokenizer.decode(ids)


def test_every_trained_model_token_is_one_a_worker_sampled_with_its_log_prob(agent_run, decode):
    sampled = {(tuple(tokens), tuple(logprobs)): name for name, tokens, logprobs in agent_run.sampled.values()}
    turns = [(g, row, turn) for g in agent_run.trained for row in range(len(g.token_ids)) for turn in model_turns(g, row)]
    assert turns
    for group, row, (tokens, logprobs) in turns:
        assert (tuple(tokens), tuple(logprobs)) in sampled, "a trained model turn no worker sampled (re-tokenized?)"
    three = [(g, row) for g in agent_run.trained for row in range(len(g.token_ids))
             if marker_of(g, row, decode) == "three_turns" and len(model_turns(g, row)) == 3]
    assert three, "no three-turn episode was trained as one sequence"
    group, row = three[0]
    inserted = [group.token_ids[row][s:e] for s, e, value in segments(group.model_mask(row)) if not value]
    assert all("<tool_response>" in decode(ids) for ids in inserted)  # tool results between the turns, as context


def episodes_of(agent_run, kind, decode) -> list[list[tuple[Group, int]]]:
    """The trained episodes ``kind`` played: each its rows (group, row), in order."""
    found: dict[tuple[int, int], list[tuple[Group, int]]] = {}
    for group in agent_run.trained:
        for row in range(len(group.token_ids)):
            if marker_of(group, row, decode) == kind:
                found.setdefault((id(group), group.episode_rows()[row]), []).append((group, row))
    return list(found.values())


def test_a_rewritten_history_is_a_segment_of_its_own(agent_run, decode):
    """Three calls, the third on a rewritten history: at least two segments, the last its one turn,
    three turns in all (a first reply cut by its budget splits the first two calls as well)."""
    played = episodes_of(agent_run, "rewrite", decode)
    assert played
    for rows in played:
        assert len(rows) >= 2 and sum(len(model_turns(g, row)) for g, row in rows) == 3
        group, row = rows[-1]
        assert "Earlier you looked into" in decode(group.prompt_ids[row]) and len(model_turns(group, row)) == 1


def test_a_retried_call_is_trained_once(agent_run, decode):
    """Three calls, the second a retry of the first: two turns trained, the first answer never."""
    played = episodes_of(agent_run, "retry", decode)
    assert played and all(sum(len(model_turns(g, row)) for g, row in rows) == 2 for rows in played)
    book = agent_run.agents[0].desk.book
    assert book.counts.calls_abandoned >= len(played)


def test_the_agents_sdk_and_an_external_program_play_episodes_that_are_trained(agent_run, decode):
    kinds = {marker_of(g, row, decode) for g in agent_run.trained for row in range(len(g.token_ids))}
    assert {"agents_sdk", "three_turns"} <= kinds
    assert agent_run.external["statuses"] == [200, 200]
    book = agent_run.agents[0].desk.book
    assert book.counts.episodes_rewarded >= 8 and book.counts.groups_admitted >= 4


def test_a_worker_lying_about_its_log_probs_is_caught_and_none_of_its_calls_trained(agent_run):
    state = agent_run.agents[0].desk.state
    liar = next(r for r in state.registry.records() if r.name == "local-1")
    assert liar.quarantined
    names = {r.worker_id: r.name for r in state.registry.records()}
    assert all(names[w] == "local-0" for g in agent_run.trained for w in g.workers())
    assert state.books.counters.workers_quarantined == 1

