"""The training service's parts in memory: turns in seq_id order and once, futures, sessions,
sampling work in the books, sampler bundles, stops."""

import asyncio
import threading
import time

import pytest
import torch

from echo2.broadcast.bundle import SamplerAdapter, bundle_payload, read_bundle
from echo2.broadcast.integrity import CorruptPayload
from echo2.core.sample_queue import SampleQueue, SampleWork
from echo2.model.sampling import Samples, stop_length
from echo2.rollout.engines.bundles import BASE_SAMPLER, SamplerWeights
from echo2.service.checkpoints import CheckpointStore, TinkerPath
from echo2.service.futures import Futures
from echo2.service.sessions import Sessions
from echo2.service.turns import RequestError, Turns


def outcome(futures: Futures, request_id: str, wait_s: float = 5.0):
    return asyncio.run(futures.wait(request_id, wait_s))


def test_requests_run_in_seq_id_order_whatever_order_they_arrive_in():
    futures, ran = Futures(), []
    turns = Turns(futures)
    release = threading.Event()
    ids = {seq: turns.submit("m", seq, lambda seq=seq: ran.append(seq) or seq) for seq in (2, 3, 1)}
    assert outcome(futures, ids[3], wait_s=0.2) is None  # waiting for seq 0
    turns.submit("m", 0, lambda: (release.wait(5), ran.append(0)))
    release.set()
    assert [outcome(futures, ids[s]).result for s in (1, 2, 3)] == [1, 2, 3]
    assert ran == [0, 1, 2, 3]
    turns.close()


def test_a_request_sent_again_is_the_same_request_applied_once():
    futures, applied = Futures(), []
    turns = Turns(futures)
    first = turns.submit("m", 0, lambda: applied.append("step") or len(applied))
    again = turns.submit("m", 0, lambda: applied.append("step") or len(applied))
    assert first == again and outcome(futures, first).result == 1 and applied == ["step"]
    with pytest.raises(RequestError, match="behind its turns"):
        turns.submit("other", -1, lambda: None)
    turns.close()


def test_a_request_whose_turn_never_comes_fails_after_the_gap_timeout():
    futures = Futures()
    turns = Turns(futures, gap_timeout_s=10)
    stuck = turns.submit("m", 5, lambda: "never")
    assert turns.expire_gaps(now=time.monotonic()) == 0
    assert turns.expire_gaps(now=time.monotonic() + 11) == 1
    failed = outcome(futures, stuck)
    assert failed.category == "user" and "seq_id 0, which never came" in failed.error
    turns.close()


def test_a_failing_request_fails_its_future_and_the_next_one_runs():
    futures = Futures()
    turns = Turns(futures)

    def refuse():
        raise RequestError("no such thing")

    bad, good = turns.submit("m", 0, refuse), turns.submit("m", 1, lambda: "ok")
    assert (outcome(futures, bad).error, outcome(futures, bad).category) == ("no such thing", "user")
    assert outcome(futures, good).result == "ok"
    crash = turns.submit("m", 2, lambda: 1 / 0)
    assert outcome(futures, crash).category == "server" and "ZeroDivisionError" in outcome(futures, crash).error
    turns.close()


def test_futures_forget_old_results_and_unknown_ids_are_key_errors():
    futures = Futures(keep_s=0.0)
    first = futures.create()
    futures.resolve(first, 1)
    second = futures.create()
    futures.resolve(second, 2)  # the first is older than keep_s now
    assert not futures.known(first) and futures.known(second)
    with pytest.raises(KeyError):
        outcome(futures, "req-404")


def test_silent_sessions_end_and_heartbeats_of_ended_ones_are_refused():
    sessions = Sessions(timeout_s=30)
    alive, silent = sessions.create([], "0.38.0", "a", now=0), sessions.create([], "0.38.0", "a", now=0)
    assert sessions.heartbeat(alive.session_id, now=25)
    assert [s.session_id for s in sessions.silent(now=40)] == [silent.session_id]
    assert not sessions.heartbeat(silent.session_id, now=41) and sessions.heartbeat(alive.session_id, now=41)


def test_sampling_work_goes_to_workers_holding_its_weights_and_comes_back_first_in_line():
    queue = SampleQueue()
    old, new = SampleWork("a", min_version=1, rows=4), SampleWork("b", min_version=3, rows=4)
    queue.add(old)
    queue.add(new)
    assert queue.servable(2) and not SampleQueue().servable(5)
    taken = queue.take(2, most=4)
    assert [w.request_id for w in taken.values()] == ["a"] and len(queue) == 1
    queue.add_front(list(taken.values()))
    assert [w.request_id for w in queue.take(9, most=4).values()] == ["a", "b"]
    queue.add(old)
    assert queue.drop({"a"}) == 1 and len(queue) == 0


def test_a_request_whose_leases_fail_on_two_workers_is_poisoned_and_never_leased_again():
    queue = SampleQueue()
    work = SampleWork("poison", min_version=0, rows=1)
    queue.add(work)
    assert queue.failed(queue.take(0, most=1), "w1") == [] and len(queue) == 1  # first in line again
    assert queue.failed(queue.take(0, most=1), "w1") == []  # the same worker twice is one worker
    assert queue.failed(queue.take(0, most=1), "w2") == [work] and len(queue) == 0
    other = SampleWork("answered", min_version=0, rows=1)
    queue.add(other)
    queue.failed(queue.take(0, most=1), "w1")
    queue.settled([other])  # answered by another worker: its failure forgotten
    queue.add(other)
    assert queue.failed(queue.take(0, most=1), "w2") == []


def _sampler(rank: int, seed: int) -> SamplerAdapter:
    generator = torch.Generator().manual_seed(seed)
    return SamplerAdapter(rank=rank, alpha=8.0, tensors={
        "layer.lora_A.weight": torch.randn(rank, 3, generator=generator),
        "layer.lora_B.weight": torch.randn(2, rank, generator=generator)})


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.layer = torch.nn.Linear(3, 2, bias=False)

    def get_output_embeddings(self):
        return None

    def get_input_embeddings(self):
        return self.embed


def test_a_bundle_carries_each_sampler_and_a_worker_merges_the_one_a_request_names():
    samplers = {"s1": _sampler(2, 0), "s2": _sampler(1, 1)}
    payload = bundle_payload(samplers)
    assert bundle_payload(dict(reversed(samplers.items()))) == payload  # the same layout, for deltas
    read = read_bundle(payload)
    assert {name: (s.rank, s.alpha) for name, s in read.items()} == {"s1": (2, 8.0), "s2": (1, 8.0)}
    model = Tiny()
    base = model.layer.weight.detach().clone()
    weights = SamplerWeights(model)
    weights.load(payload)
    for name in ("s1", "s2", "s1", BASE_SAMPLER):
        merged = weights.use(name).layer.weight
        expected = base if name == BASE_SAMPLER else base + samplers[name].scale * (
            samplers[name].tensors["layer.lora_B.weight"] @ samplers[name].tensors["layer.lora_A.weight"])
        assert torch.allclose(merged, expected, atol=1e-6)  # from the base every time: nothing accumulates
    with pytest.raises(KeyError):
        weights.use("s9")
    with pytest.raises(CorruptPayload, match="not a sampler bundle"):
        read_bundle(b"\x08" + b"\x00" * 7 + b"{}")
    wrong = {"s1": SamplerAdapter(rank=2, alpha=8.0, tensors={"layer.lora_A.weight": torch.zeros(2, 4),
                                                              "layer.lora_B.weight": torch.zeros(2, 2)})}
    with pytest.raises(CorruptPayload, match="do not fit"):
        weights.load(bundle_payload(wrong))


def test_a_completion_ends_at_its_first_stop_token_or_string():
    text = {1: "a", 2: "b", 3: "\n", 4: "X"}

    def decode(ids):
        return "".join(text[i] for i in ids)

    assert stop_length([1, 2, 4, 1], {4}, [], decode) == 3
    assert stop_length([1, 3, 3, 2], set(), ["\n\n"], decode) == 3
    assert stop_length([1, 3, 3, 4], {4}, ["\n\n"], decode) == 3  # the earlier of the two
    assert stop_length([1, 2], {4}, ["zz"], decode) is None


def test_checkpoint_paths_stay_inside_the_service_folder_and_their_tenants(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.path("session-1:train:0", "weights", "step-3")
    assert path.uri == "tinker://session-1:train:0/weights/step-3"
    assert TinkerPath.parse(path.uri) == path and store.folder("alice", path).is_relative_to(tmp_path / "alice")
    store.folder("alice", path).mkdir(parents=True)
    assert store.existing("alice", path.uri)[1] == store.folder("alice", path)
    with pytest.raises(RequestError, match="no checkpoint at"):  # another tenant's save does not exist for bob
        store.existing("bob", path.uri)
    for bad in ("tinker://x/weights/../../etc", "tinker://../weights/a", "tinker://x/other/a", "s3://x/weights/a",
                "tinker://x/weights/a/b"):
        with pytest.raises(RequestError, match="not a checkpoint path"):
            TinkerPath.parse(bad)
    with pytest.raises(RequestError, match="checkpoint name"):
        store.path("m", "weights", "../up")
    with pytest.raises(RequestError, match="no checkpoint at"):
        store.existing("alice", "tinker://m/weights/missing")
    for half in ("x.partial", "x.replaced"):
        with pytest.raises(RequestError, match="not ending"):
            store.path("m", "weights", half)
        with pytest.raises(RequestError, match="not a checkpoint path"):
            store.existing("alice", f"tinker://m/weights/{half}")


def test_a_save_replaced_is_set_aside_until_the_new_one_is_in_and_a_kill_between_loses_neither(tmp_path):
    from echo2.learner.checkpoint import atomic_folder, recover

    final = tmp_path / "run:1" / "weights" / "x"
    with atomic_folder(final) as partial:
        (partial / "v").write_text("1")
    with pytest.raises(RuntimeError), atomic_folder(final) as partial:  # a save that fails keeps the old one
        (partial / "v").write_text("2")
        raise RuntimeError("killed")
    assert (final / "v").read_text() == "1"
    final.rename(final.with_name("x.replaced"))  # a kill between setting the old one aside and the rename
    recover(final)
    assert (final / "v").read_text() == "1" and not final.with_name("x.replaced").exists()
    (tmp_path / "run:1" / "weights" / "y.partial").mkdir()  # left by a kill -9 mid-save, and a legacy layout
    store = CheckpointStore(tmp_path)
    assert store.sweep("default") == 1
    assert (tmp_path / "default" / "run:1" / "weights" / "x" / "v").read_text() == "1"
    assert store.of_run("default", "run:1", "weights") == [tmp_path / "default" / "run:1" / "weights" / "x"]


def test_what_a_worker_sends_for_a_sampling_lease_is_refused_when_it_cannot_be_a_sample():
    """NaN, -1e308, 10**30, a newline, too many or too long completions: refused before a client
    (or an audit) sees them."""
    import pydantic

    from echo2.coordinator.leases import check_samples
    from echo2.coordinator.records import Lease, Limits, Rejected
    from echo2.protocol import LeasedSample, SampledSequence, SampleResult, SubmitRequest

    def sequence(**fields):
        return {"token_ids": [3, 4], "logprobs": [-0.5, -0.2], "stop_reason": "stop", **fields}

    for bad in ({"logprobs": [float("nan"), -0.2]}, {"logprobs": [-1e308, -0.2]}, {"logprobs": [0.5, -0.2]},
                {"stop_reason": "stop\nforged"}, {"token_ids": []}):
        with pytest.raises(pydantic.ValidationError):
            SampledSequence.model_validate(sequence(**bad))
    for prompt in ([float("nan")], [-1e308], [1.0]):
        with pytest.raises(pydantic.ValidationError):
            SampleResult(slot=0, sequences=[SampledSequence(**sequence())], prompt_logprobs=prompt)
    asked = LeasedSample(slot=0, sampler="s1", prompt_ids=[3, 4, 5], num_samples=2, max_tokens=3, temperature=1.0,
                         prompt_logprobs=True)
    lease = Lease(lease_id="l", worker_id="w", version=1, slots={0: SampleWork("r", 1, 2, asked)}, granted_at=0.0,
                  deadline=1e9, kind="sample")
    limits = Limits(group_size=2, max_new_tokens=3, vocab_size=20)

    def submit(sequences, prompt=(-1.0, -1.0), slot=0):
        return SubmitRequest(lease_id="l", version=1, generate_seconds=1.0, samples=[SampleResult(
            slot=slot, sequences=[SampledSequence(**s) for s in sequences],
            prompt_logprobs=None if prompt is None else list(prompt))])

    check_samples(lease, submit([sequence(), sequence()]), limits)  # a valid answer passes
    for request, code in ((submit([sequence()]), "bad_group_size"),
                          (submit([sequence(), sequence(token_ids=[3] * 4, logprobs=[-0.1] * 4)]), "too_long"),
                          (submit([sequence(), sequence(token_ids=[3, 99])]), "bad_token"),
                          (submit([sequence(), sequence(token_ids=[3, 10**30])]), "bad_token"),
                          (submit([sequence(), sequence()], prompt=None), "bad_shape"),
                          (submit([sequence(), sequence()], slot=7), "bad_slots")):
        with pytest.raises(Rejected) as refused:
            check_samples(lease, request, limits)
        assert refused.value.code == code


def test_a_workers_alike_sampling_requests_run_as_one_batch_and_a_seeded_one_alone():
    from types import SimpleNamespace

    from echo2.config import load_config
    from echo2.launch.train import run_spec
    from echo2.protocol import LeasedSample, LeaseResponse
    from echo2.rollout.lease_generation import LeaseGenerator

    class Engine:
        def __init__(self) -> None:
            self.calls: list[list[list[int]]] = []
            self.draws: list = []

        max_context = None

        def sample(self, sampler, prompt_ids, params, draws, finished=None, updates=None):
            self.calls.append([list(p) for p in prompt_ids])  # each row's completion: its prompt's first token, then the stop (9)
            self.draws.append(list(draws.keys))
            return Samples(completion_ids=[[p[0], 9, 5] for p in prompt_ids],
                           logprobs=[[-0.1, -0.2, -0.3] for _ in prompt_ids])

        def prompt_logprobs(self, sampler, prompt_ids, temperature):
            return [-1.0] * (len(prompt_ids) - 1)

    engine = Engine()
    generator = LeaseGenerator(run_spec(load_config(None, [])), engine, SimpleNamespace(eos_token_id=9, decode=lambda ids, **_: str(ids)),
                               client=None, stop=threading.Event())
    alike = dict(sampler="s1", max_tokens=3, temperature=1.0)
    requests = [LeasedSample(slot=4, prompt_ids=[1, 2], num_samples=2, **alike),
                LeasedSample(slot=5, prompt_ids=[3], num_samples=1, seed=7, **alike),
                LeasedSample(slot=6, prompt_ids=[4, 4, 4], num_samples=1, prompt_logprobs=True, **alike)]
    lease = LeaseResponse(status="granted", latest_version=1, lease_id="l", version=1, samples=requests, draw_seed=99)
    submission, _ = generator.generate(lease, lambda: 1, None)
    assert engine.calls == [[[1, 2], [1, 2], [4, 4, 4]], [[3]]]  # the alike ones in one batch, the seeded alone
    # rows drawn from the lease's seed by slot, the seeded request from its own seed (any lease, the same draws)
    assert engine.draws == [[(99, 4 << 20), (99, (4 << 20) | 1), (99, 6 << 20)], [(7, 0)]]
    results = submission.samples
    assert [r.slot for r in results] == [4, 5, 6]  # in the lease's order
    assert [[s.token_ids for s in r.sequences] for r in results] == [[[1, 9], [1, 9]], [[3, 9]], [[4, 9]]]
    assert all(s.stop_reason == "stop" for r in results for s in r.sequences)
    assert results[2].prompt_logprobs == [-1.0, -1.0] and results[0].prompt_logprobs is None


def test_the_desk_keeps_the_samplers_clients_may_use_fails_what_nobody_answers_and_forgets_old_retries():
    """``SamplingDesk.retire``: a sampler idle past ``sampler_idle_s`` leaves the fleet's bundles —
    a superseded one for good, a client's newest kept aside until a request names it again, one a
    request waits for not at all — a request no worker answered fails at ``sample_timeout_s``, and
    the retry book forgets a request once its result is forgotten. Publishes run on the fleet's
    lane, a burst of saves joining the one queued."""
    from tinker import types

    from echo2.broadcast.publisher import Publisher
    from echo2.config import BroadcastConfig
    from echo2.coordinator.records import Limits
    from echo2.coordinator.state import CoordinatorState
    from echo2.model.loading import load_model, load_tokenizer
    from echo2.model.sources import SHIPPED_MODEL
    from echo2.protocol import RunSpec
    from echo2.service.sampling import AuditSettings, SamplingDesk, SamplingLimits
    from echo2.service.training import TrainingModels

    spec = RunSpec(model="m", dtype="float32", group_size=2, temperature=1.0, max_new_tokens=4, groups_per_lease=8,
                   protocol="async", staleness=1, fetch_delay_s=0.0, broadcast_stall_s=5.0, broadcast_timeout_s=30.0,
                   heartbeat_interval_s=1.0, seed=0, sampler_bundles=True)
    state = CoordinatorState(spec, Limits(group_size=2, max_new_tokens=4, vocab_size=20), training=None,
                             run_token="t", lease_timeout_s=60, heartbeat_timeout_s=60)
    models = TrainingModels(load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL), lora_alpha=8, max_rank=4,
                            micro_batch=8)
    publisher = Publisher(BroadcastConfig(encoding="delta"), keep_versions=4, token=None, kind="bundle")
    futures = Futures()
    turns = Turns(futures)
    desk = SamplingDesk(state, publisher, models, turns, futures, SamplingLimits(4, 4, None, 90.0, 60.0),
                        AuditSettings(1, 0.5, 0.1, 0.5), None)  # before any client, as echo2 serve makes it
    state.add_source(desk)
    models.create("m", types.LoraConfig(rank=2, seed=0))
    try:
        desk.publish()
        desk.wait_published()
        old, kept, newest = desk.snapshot("m"), desk.snapshot("m"), desk.snapshot("m")
        desk.wait_published()
        assert old.version <= kept.version <= newest.version == desk.version <= 3  # saves may join a queued publish
        desk.open_session("c", "c:sample:0", kept.name)
        desk.open_session("c", "c:sample:1", newest.name)
        asked = types.SampleRequest(sampling_session_id="c:sample:0", seq_id=0, num_samples=1,
                                    prompt=types.ModelInput.from_ints([1, 2, 3]),
                                    sampling_params=types.SamplingParams(max_tokens=2))
        request_id, _ = desk.sample(asked)
        assert desk.sample(asked)[0] == request_id  # a retry: the same request
        now = time.monotonic()
        desk.retire(now + 10)
        assert set(desk.samplers) == {BASE_SAMPLER, old.name, kept.name, newest.name}  # none idle yet
        desk.retire(now + 61)
        desk.wait_published()
        assert set(desk.samplers) == {BASE_SAMPLER, kept.name, newest.name}  # old dropped
        assert kept.bundled and not newest.bundled  # waited for; the newest kept aside, out of the bundle
        assert outcome(futures, request_id, 0.1) is None
        version = desk.version
        desk.retire(now + 95)
        desk.wait_published()
        assert desk.version == version  # nothing left: no new version
        assert "sample_timeout_s" in outcome(futures, request_id).error and desk.counts.timed_out == 1
        futures.keep_s = 0.0
        futures.resolve(futures.create(), None)  # a result past its keep time is forgotten as the next one is made
        desk.retire(now + 96)
        desk.wait_published()
        assert not desk._seen and kept.name not in desk.samplers  # the retry book forgot it; kept left too
        again = desk.sample(asked.model_copy(update={"sampling_session_id": "c:sample:1", "seq_id": 1}))[0]
        desk.wait_published()
        assert newest.bundled and newest.version == desk.version > version  # back in the next bundle
        assert desk.pending[again].work.min_version == newest.version
    finally:
        turns.close()
        publisher.close()


def test_echo2_serve_without_its_extra_names_it(monkeypatch, capsys):
    """A base install has no peft: ``echo2 serve`` says which extra to install, not a raw ImportError."""
    import importlib.util

    from echo2 import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    assert cli.main(["serve"]) == 2
    said = capsys.readouterr().err
    assert "pip install 'echo2[service]'" in said and "missing: peft" in said
