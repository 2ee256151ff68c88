"""The gateway's parts without a run: the OpenAI shape (refusals by name, canonical messages, tool
calls), the episodes' books over the run's pacing ledger, and the learner's rows of an agent's group."""

import asyncio
import json
import time

import pytest
import torch
from state_support import make_state

from echo2.exchange import Group
from echo2.gateway.desk import AGENT_SOURCE
from echo2.gateway.episodes import EpisodeBook, EpisodeGone
from echo2.gateway.openai_wire import ChatRequest, CompletionRequest, Refused, canonical, reply_message
from echo2.gateway.render import Held
from echo2.gateway.trajectory import Call
from echo2.learner.objectives.advantages import group_advantages
from echo2.learner.trainer import Rollouts
from echo2.tasks import Example

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("asked, named", [
    ({"stream": True}, "stream"), ({"n": 2}, "n=2"), ({"top_p": 0.9}, "top_p"), ({"temperature": 0.2}, "rollout.temperature"),
    ({"max_tokens": 500}, "rollout.max_new_tokens"), ({"logit_bias": {"5": 1.0}}, "logit_bias"),
    ({"tool_choice": "required"}, "tool_choice"), ({"response_format": {"type": "json_object"}}, "response_format"),
])
def test_a_call_the_run_cannot_honour_is_refused_naming_the_setting(asked, named):
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], **asked)
    with pytest.raises(Refused, match=named):
        request.checked(run_temperature=0.7, max_new_tokens=64, budget=request.budget())
        request.conversation(template_tools=False)


def test_settings_that_do_not_change_the_sample_are_accepted():
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], temperature=0.7, metadata={"a": "b"}, store=False,
                          parallel_tool_calls=True, max_completion_tokens=16, stop="\n")
    assert request.checked(run_temperature=0.7, max_new_tokens=64, budget=request.budget()) == (16, ["\n"])
    with pytest.raises(Refused, match="images"):
        canonical({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
    with pytest.raises(Refused, match="echo"):
        CompletionRequest(prompt="x", echo=True).check_text()


def test_tools_are_described_in_the_system_message_and_tool_calls_parsed_from_the_reply():
    request = ChatRequest(messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "n?"}],
                          tools=[TOOL])
    (system, user), tools = request.conversation(template_tools=False)
    assert tools is None
    assert system["role"] == "system" and system["content"].startswith("Be brief.") and '"lookup"' in system["content"]
    assert "<tool_call>" in system["content"] and user == {"role": "user", "content": "n?"}
    message, said = reply_message('Let me look. <tool_call>{"name": "lookup", "arguments": {"key": 7}}</tool_call>')
    assert message.content == "Let me look." and message.tool_calls[0].function.name == "lookup"
    assert json.loads(message.tool_calls[0].function.arguments) == {"key": 7}
    # what the harness sends back (its own ids, the SDK's dump) reads as what the gateway said
    echoed = message.model_dump(exclude_none=True)
    echoed["tool_calls"][0]["id"] = "call_other"
    assert canonical(echoed) == said
    assert canonical({"role": "tool", "tool_call_id": "x", "content": "7"})["content"] == "<tool_response>\n7\n</tool_response>"
    plain, said = reply_message('no call, just <tool_call>{"broken json</tool_call>')
    assert plain.tool_calls is None and said["content"].startswith("no call")


def book(staleness=0, groups_per_step=1, timeout_s=60.0):
    state = make_state(staleness, groups_per_step=groups_per_step)
    state.members.register("w")
    return state, EpisodeBook(state.parts, group_size=2, episode_timeout_s=timeout_s)


def play(book, episode, tokens):
    """One call of ``episode`` answered by the run's one worker."""
    worker = next(iter(book.parts.registry.workers))
    call = Call(f"c{episode.episode_id}", [1, 2, 3], tokens, [-0.5] * len(tokens), version=book.parts.version)
    book.record(episode, call, worker, Held([{"role": "user", "content": "q"}], [1, 2, 3, *tokens], True))


def test_g_rewarded_episodes_of_one_example_become_one_group_in_the_learners_buffer():
    state, episodes = book()
    first, second = episodes.claim(1.0), episodes.claim(1.0)
    assert first.group is second.group and first.example == second.example
    assert episodes.claim(0.1) is None  # S = 0, B = 1: the window holds one group
    play(episodes, first, [4, 5])
    play(episodes, second, [6])
    episodes.reward(first.episode_id, 1.0)
    assert episodes.reward(first.episode_id, 1.0) is first  # a retried reward: applied once
    with pytest.raises(EpisodeGone, match="cannot be set again"):
        episodes.reward(first.episode_id, 0.0)
    assert len(state.books.ledger) == 0
    episodes.reward(second.episode_id, 0.0)
    (group,) = state.take_batch(0, timeout_s=1)
    assert group.rewards == [1.0, 0.0] and group.token_ids == [[4, 5], [6]] and group.prompt_ids == [[1, 2, 3]] * 2
    assert group.workers() == [next(iter(state.registry.workers))] and group.episodes == [0, 1]
    with pytest.raises(EpisodeGone, match="over"):
        episodes.playing(first.key)


def test_an_episode_never_rewarded_within_its_deadline_is_dropped_with_its_group_and_counted():
    state, episodes = book(timeout_s=5.0)
    first, second = episodes.claim(1.0), episodes.claim(1.0)
    play(episodes, first, [4])
    episodes.reward(first.episode_id, 1.0)
    with state.cond:
        assert episodes.expire(now=time.monotonic() + 6.0) == 1
    assert episodes.counts.episodes_dropped == 1 and episodes.counts.groups_dropped == 1
    assert state.books.ledger.useful_slots == 0 and list(state.books.ledger.requeued) == [first.example]
    with pytest.raises(EpisodeGone, match="dropped"):
        episodes.reward(second.episode_id, 1.0)
    third = episodes.claim(1.0)  # the window is free again, the example first in line
    assert third.example == first.example


def test_a_dropped_agent_groups_prompt_returns_at_the_front_of_the_queue_as_a_lost_leases_does():
    state, episodes = book(groups_per_step=2)
    a = [episodes.claim(1.0) for _ in range(2)]
    b = [episodes.claim(1.0) for _ in range(2)]
    assert a[0].group is not b[0].group
    episodes.give_up(b[0].episode_id, "its agent raised")
    episodes.give_up(a[0].episode_id, "its agent raised")
    assert list(state.books.ledger.requeued) == [a[0].example, b[0].example]  # the latest lost first in line
    assert episodes.claim(1.0).example == a[0].example


def test_an_agents_segments_share_their_episodes_advantage():
    """Episode 0 played as two segments (its history rewritten), episode 1 as one: three rows, two advantages."""
    group = Group(slot=0, example=Example("unused", "0"), version=0, worker_id="w", rewards=[1.0, 0.0],
                  token_ids=[[4], [5, 6], [7]], logprobs=[[-1.0], [-1.0, -1.0], [-1.0]], prompt_ids=[[1], [2, 3], [1]],
                  episodes=[0, 0, 1], turn_workers=[["w"], ["w"], ["w"]])
    rollouts = Rollouts.from_groups([group], tokenizer=None)
    advantages = group_advantages(rollouts.rewards).flatten()[rollouts.episode_of]
    assert rollouts.prompts == [[1], [2, 3], [1]] and rollouts.rewards.shape == (1, 2)
    assert advantages[0] == advantages[1] > 0 > advantages[2]
    assert torch.equal(rollouts.lengths, torch.tensor([[3, 1]]))


def test_a_group_with_a_call_of_a_worker_quarantined_meanwhile_is_not_admitted():
    state, episodes = book()
    first, second = episodes.claim(1.0), episodes.claim(1.0)
    play(episodes, first, [4])
    play(episodes, second, [5])
    state.quarantine(next(iter(state.registry.workers)), "its calls failed their audit")
    episodes.reward(first.episode_id, 1.0)
    episodes.reward(second.episode_id, 0.0)
    assert len(state.books.ledger) == 0 and episodes.counts.groups_dropped == 1
    assert state.books.counters.groups_discarded_quarantined == 1


def desk_over(state, episodes, call_timeout_s=10.0):
    from state_support import EOS, decode, encode

    from echo2.gateway.desk import CallSettings, GatewayDesk

    desk = GatewayDesk(state, episodes, chat=None, encode=encode, decode=decode, eos_id=EOS,
                       settings=CallSettings(temperature=1.0, max_new_tokens=4, max_context=None,
                                             call_timeout_s=call_timeout_s, model_name="m"))
    state.add_source(Calls(desk))  # the calls' outcomes: to this desk
    return desk


class Calls:
    """An agent run's work source over a bare desk (what :class:`echo2.launch.agents.AgentRun` adds)."""

    name = AGENT_SOURCE

    def __init__(self, desk) -> None:
        self.results, self.refused = desk.results, desk.refused

    def reap(self) -> None:
        pass

    def report(self) -> dict:
        return {}


def answer_one_lease(state, worker, tokens):
    """The worker's side: lease what waits, answer each call with ``tokens``."""
    from echo2.protocol import SampledSequence, SampleResult, SubmitRequest

    lease = state.work.lease(worker, 0, 4, wait_s=5)
    assert lease.status == "granted" and len(lease.samples) == 1
    results = [SampleResult(slot=s.slot, sequences=[SampledSequence(token_ids=tokens, logprobs=[-0.5] * len(tokens),
                                                                    stop_reason="stop")]) for s in lease.samples]
    state.work.submit(worker, SubmitRequest(lease_id=lease.lease_id, version=0, samples=results, generate_seconds=0.1))
    return lease


def test_a_text_call_is_leased_to_a_worker_answered_and_continued_token_for_token():
    import threading

    from state_support import EOS, encode

    state, episodes = book()
    desk = desk_over(state, episodes)
    worker = state.registry.workers[next(iter(state.registry.workers))]
    episode = episodes.claim(1.0)
    leases = []
    for prompt in ("1+2=", "1+2=7+1="):
        worker_thread = threading.Thread(target=lambda: leases.append(answer_one_lease(state, worker, [10, EOS])))
        worker_thread.start()
        completion = asyncio.run(desk.complete(episode.key, CompletionRequest(prompt=prompt, max_tokens=4)))
        worker_thread.join(10)
        assert completion.choices[0].text == "7" and completion.choices[0].finish_reason == "stop"
    assert leases[0].samples[0].prompt_ids == encode("1+2=")
    assert leases[1].samples[0].prompt_ids == encode("1+2=") + [10, EOS] + encode("+1=")  # the sampled ids kept
    (segment,) = episode.trajectory.segments
    assert segment.episode.token_ids == [10, EOS, *encode("+1="), 10, EOS] and segment.episode.mask == [1, 1, 0, 0, 0, 1, 1]
    with pytest.raises(Refused, match="max_tokens=5"):
        asyncio.run(desk.complete(episode.key, CompletionRequest(prompt="1=", max_tokens=5)))


def test_a_call_no_worker_answers_fails_in_time_and_leaves_the_queue():
    from echo2.gateway.desk import CallTimeout

    state, episodes = book()
    desk = desk_over(state, episodes, call_timeout_s=0.5)
    episode = episodes.claim(1.0)
    with pytest.raises(CallTimeout, match="agent.call_timeout_s=0.5"):
        asyncio.run(desk.complete(episode.key, CompletionRequest(prompt="1+2=")))
    assert len(state.books.samples) == 0 and not desk._waiting


def test_a_call_whose_leases_fail_on_two_workers_is_refused_to_its_agent_and_its_draws_recorded():
    import threading

    from echo2.protocol import LeaseFailure

    state, episodes = book()
    state.members.register("w2")
    desk = desk_over(state, episodes)
    first, second = list(state.registry.workers.values())
    episode = episodes.claim(1.0)

    def fail_on_each() -> None:
        for worker in (first, second):
            lease = state.work.lease(worker, 0, 4, wait_s=5)
            state.work.fail(worker, LeaseFailure(lease_id=lease.lease_id, reason="RuntimeError: cannot sample this"))

    failing = threading.Thread(target=fail_on_each)
    failing.start()
    with pytest.raises(Refused, match="failed on two workers.*cannot sample this"):
        asyncio.run(desk.complete(episode.key, CompletionRequest(prompt="1+2=", max_tokens=4)))
    failing.join(10)
    assert state.books.counters.requests_poisoned == 1 and len(state.books.samples) == 0
    assert first.parked_until == 0 and second.parked_until == 0  # a client's request failing parks no worker
    answered = threading.Thread(target=lambda: answer_one_lease(state, first, [10, 2]))
    answered.start()
    asyncio.run(desk.complete(episode.key, CompletionRequest(prompt="1+2=", max_tokens=4)))
    answered.join(10)
    (segment,) = episode.trajectory.segments
    seed, row, position = segment.turn_draws[0]
    assert position == 0 and row == 1 << 20 and 0 <= seed < 2**63  # slot 1, completion 0: what the audit replays


def test_an_episode_makes_at_most_its_budget_of_calls():
    import threading

    from echo2.gateway.desk import CallLimits

    state, episodes = book()
    desk = desk_over(state, episodes)
    desk.limits = CallLimits(per_episode=4, in_all=256, per_episode_total=2)
    worker = state.registry.workers[next(iter(state.registry.workers))]
    episode = episodes.claim(1.0)
    for prompt in ("1+2=", "1+2=7+1="):
        answering = threading.Thread(target=lambda: answer_one_lease(state, worker, [10, 2]))
        answering.start()
        asyncio.run(desk.complete(episode.key, CompletionRequest(prompt=prompt, max_tokens=4)))
        answering.join(10)
    with pytest.raises(Refused, match="agent.max_calls_per_episode_total=2"):
        asyncio.run(desk.complete(episode.key, CompletionRequest(prompt="1+2=7+1=3", max_tokens=4)))
    assert len(state.books.samples) == 0  # refused before it was queued


def test_calls_in_flight_are_capped_per_episode_and_per_run_and_free_no_thread():
    """100 concurrent calls of one episode had held 100 server threads (an honest worker's heartbeat
    waited 30 s); now each waits on the event loop (all of them here on one thread's loop) and past
    the cap is refused (429) at once."""
    from echo2.gateway.desk import CallLimits, CallsBusy, CallTimeout

    state, episodes = book()
    desk = desk_over(state, episodes, call_timeout_s=0.5)
    desk.limits = CallLimits(per_episode=2, in_all=3)
    first, second = episodes.claim(1.0), episodes.claim(1.0)

    async def flood() -> list:
        calls = [desk.complete(first.key, CompletionRequest(prompt="1+2=")) for _ in range(5)]
        calls += [desk.complete(second.key, CompletionRequest(prompt="1+2=")) for _ in range(5)]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(flood())
    busy = [o for o in outcomes if isinstance(o, CallsBusy)]
    assert sum(isinstance(o, CallTimeout) for o in outcomes) == 3 and len(busy) == 7  # 2 of one episode, 1 more in all
    assert any("episode" in str(b) for b in busy) and any("calls are in flight" in str(b) for b in busy)
    assert not desk._in_flight and not desk._waiting


def test_a_busy_episode_is_refused_at_the_door_and_its_refusals_held_by_its_own_count():
    """Past its calls in flight, an episode's next call is refused at the door (before its body is
    read), each refusal held longer the more of that key's are held (4 a second at most), while
    another episode's call passes the door."""
    from echo2.gateway.api import CALL_PATHS, gateway_doors
    from echo2.gateway.desk import CallLimits, CallTimeout

    state, episodes = book()
    desk = desk_over(state, episodes, call_timeout_s=0.5)
    desk.limits = CallLimits(per_episode=2, in_all=8)
    door = gateway_doors(desk, "token")[CALL_PATHS[1]]
    flooder, honest = episodes.claim(1.0), episodes.claim(1.0)

    def check(key: str):
        return door.check(CALL_PATHS[1], {"authorization": f"Bearer {key}"})

    async def flood() -> tuple[list, list]:
        calls = [asyncio.ensure_future(desk.complete(flooder.key, CompletionRequest(prompt="1+2="))) for _ in range(2)]
        await asyncio.sleep(0.05)  # both in flight, waiting for a worker
        refusals = [check(flooder.key) for _ in range(12)]
        assert check(honest.key) is None and check("forged").status == 401
        return refusals, await asyncio.gather(*calls, return_exceptions=True)

    refusals, outcomes = asyncio.run(flood())
    assert all(isinstance(o, CallTimeout) for o in outcomes)
    assert {r.status for r in refusals} == {429} and all(r.retry_after_s == 1.0 for r in refusals)
    assert [r.hold_s for r in refusals] == [max(1.0, n / 4) for n in range(1, 13)]  # 12 held: 3 s for the last


def test_the_tarpit_releases_a_callers_count_when_its_hold_is_over():
    from echo2.net.guard import Tarpit

    async def holds() -> list[float]:
        tarpit = Tarpit(per_s=20.0, most_s=1.4)
        first = [tarpit.hold_s("a") for _ in range(30)]
        await asyncio.sleep(1.5)  # every hold over: the count is back to nothing
        return [first[0], first[24], first[-1], tarpit.hold_s("a"), tarpit.hold_s("b")]

    assert asyncio.run(holds()) == [1.0, 1.25, 1.4, 1.0, 1.0]  # at least TARPIT_S, at most most_s


def test_an_agent_that_cannot_be_imported_or_is_not_async_is_a_one_line_config_error(tmp_path):
    from echo2.config import ConfigError, load_config
    from echo2.launch.agents import AgentRun

    for name, said in (("agent:no_such_module:play", "cannot import"), ("agent:json:dumps", "not an async function")):
        with pytest.raises(ConfigError, match=said):
            AgentRun(load_config(None, [f"task.name={name}"]), tmp_path)
