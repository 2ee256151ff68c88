"""The training service's primitives against echo2's own learner: one trainer, two drivers.

Tinker ``importance_sampling`` or ``ppo`` steps (forward_backward + optim_step, the service's
:class:`~echo2.service.training.TrainingModels`) on a batch of groups must be the step echo2's
own GRPO learner takes on the same groups and settings, since both run echo2's surrogate terms
and its one update (:mod:`echo2.learner.update`): the client expresses GRPO's normalisation in
its per-token advantages (``A_i / (len_i * N)``). Tolerance: 2e-5 on every adapter parameter
after two steps that moved it by 2e-3 (measured: 7.5e-6 for ppo, 8.1e-6 for importance
sampling, what float32 arithmetic leaves of two batch layouts — both score a group's samples on
their prompt's cache, the service its datums' common beginning, full prompt positions included;
advantages without GRPO's per-sequence length normalisation differ by 4.0e-3).
"""

import copy
import random

import pytest
import torch
from tinker import types

from echo2.config import LearnerConfig, RolloutConfig
from echo2.config.learner import LoraConfig as LearnerLora
from echo2.exchange import Group
from echo2.learner.logprobs import completion_logprobs
from echo2.learner.objectives import group_advantages
from echo2.learner.objectives.tinker_losses import LossSpec, UnsupportedLoss
from echo2.learner.trainer import Learner
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.lora import add_adapter
from echo2.model.sources import SHIPPED_MODEL
from echo2.protocol import AdapterSpec
from echo2.service.training import TrainingModels, adam_problem
from echo2.service.turns import RequestError
from echo2.tasks import Example

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA, LR, CLIP = 4, 32.0, 1e-3, 1.0
TOLERANCE = 2e-5


@pytest.fixture(scope="module")
def shipped():
    return load_model(SHIPPED_MODEL), load_tokenizer(SHIPPED_MODEL)


def groups_of(model, tokenizer, noise: float, seed: int) -> list[Group]:
    """Four groups of four random completions whose behaviour log-probs are the model's own plus
    ``noise`` (so that some ratios leave PPO's clip range), with mixed rewards."""
    rng = random.Random(seed)
    prompts = [f"{a}+{b}=" for a, b in ((3, 4), (12, 9), (7, 7), (40, 2))]
    groups = []
    for index, prompt in enumerate(prompts):
        ids = tokenizer(prompt)["input_ids"]
        completions = [[rng.randrange(3, 17) for _ in range(rng.randrange(2, 7))] + [tokenizer.eos_token_id]
                       for _ in range(4)]
        with torch.no_grad():
            logprobs, mask = completion_logprobs(model, [ids] * 4, completions, pad_id=tokenizer.pad_token_id)
        behaviour = [[float(x) + rng.uniform(-noise, noise) for x in row[: len(c)]]
                     for row, c in zip(logprobs, completions)]
        groups.append(Group(slot=index, example=Example(prompt=prompt, answer="0"), version=0, worker_id="w",
                            token_ids=completions, logprobs=[[min(x, 0.0) for x in row] for row in behaviour],
                            rewards=[float(rng.random() < 0.5) for _ in range(4)]))
    groups[0].rewards = [1.0, 0.0, 0.0, 1.0]
    return groups


def datums_of(groups: list[Group], tokenizer) -> list[types.Datum]:
    """The groups as a Tinker client would send them: GRPO's advantages, spread per token as
    ``A_i / (len_i * N)`` (its mean over each sequence, then over the N sequences)."""
    advantages = group_advantages(torch.tensor([g.rewards for g in groups]), std_normalize=True)
    rows = sum(len(g.token_ids) for g in groups)
    datums = []
    for g, group in enumerate(groups):
        prompt = tokenizer(group.example.prompt)["input_ids"]
        for i, (completion, behaviour) in enumerate(zip(group.token_ids, group.logprobs)):
            pad = [0.0] * (len(prompt) - 1)
            per_token = float(advantages[g, i]) / (len(completion) * rows)
            datums.append(types.Datum(
                model_input=types.ModelInput.from_ints(prompt + completion[:-1]),
                loss_fn_inputs={"target_tokens": prompt[1:] + completion, "logprobs": pad + behaviour,
                                "advantages": pad + [per_token] * len(completion)}))
    return datums


def native_learner(base, tokenizer, loss: str) -> Learner:
    """echo2's learner: GRPO with the clip range a Tinker loss has (ppo: 0.8..1.2; importance
    sampling: none, and no cap on the behaviour weight)."""
    unclipped = loss == "importance_sampling"
    config = LearnerConfig(loss="grpo", lr=LR, grad_clip=CLIP, warm_start_optimizer=False, betas=(0.9, 0.99),
                           clip_low=1.0 if unclipped else 0.2, clip_high=1e9 if unclipped else 0.2,
                           ratio_cap=1e9 if unclipped else 3.0,
                           lora=LearnerLora(enabled=True, r=RANK, alpha=ALPHA, target_modules=TARGETS))
    model = add_adapter(copy.deepcopy(base), AdapterSpec(r=RANK, alpha=ALPHA, target_modules=TARGETS))
    return Learner(model, tokenizer, config, RolloutConfig(group_size=4, max_new_tokens=8), model_dir=None)


def adapter_of(model: torch.nn.Module, adapter: str) -> dict[str, torch.Tensor]:
    return {name.replace(f".{adapter}.", "."): p.detach().clone() for name, p in model.named_parameters()
            if f".{adapter}." in name}


@pytest.mark.parametrize("loss", ["ppo", "importance_sampling"])
def test_a_tinker_step_is_echo2s_own_step_on_the_same_batch(shipped, loss):
    """Two steps on two batches (Adam's first step moves each coordinate by about its learning rate
    whatever the gradient's size; the second weighs the two gradients against each other)."""
    base, tokenizer = shipped
    torch.manual_seed(0)
    native = native_learner(base, tokenizer, loss)
    service = TrainingModels(copy.deepcopy(base), tokenizer, lora_alpha=ALPHA, max_rank=8, micro_batch=64)
    client = service.create("m", types.LoraConfig(rank=RANK, train_unembed=False))
    start = adapter_of(native.model, "default")
    with torch.no_grad():  # the same initial adapter on both sides
        for name, p in service.wrapped.named_parameters():
            if f".{client.adapter}." in name:
                p.copy_(start[name.replace(f".{client.adapter}.", ".")])
    spec = LossSpec.parse(loss, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2} if loss == "ppo" else None)
    for step, seed in enumerate((1, 2)):
        groups = groups_of(native.policy, tokenizer, noise=0.4, seed=seed)
        native.step(groups, version=step)
        outputs, metrics = service.forward_backward("m", service.rows(datums_of(groups, tokenizer), spec), spec)
        service.optim_step("m", types.AdamParams(learning_rate=LR, beta1=0.9, beta2=0.99, eps=1e-8,
                                                 grad_clip_norm=CLIP))
    after_native, after_service = adapter_of(native.model, "default"), adapter_of(service.wrapped, client.adapter)
    moved = max(float((after_native[k] - start[k]).abs().max()) for k in start)
    gap = max(float((after_native[k] - after_service[k]).abs().max()) for k in start)
    assert moved > LR  # the steps moved the adapter
    assert gap < TOLERANCE, f"{loss}: the two drivers' steps differ by {gap:.2e} (the steps moved {moved:.2e})"
    assert "loss:sum" in metrics and len(outputs) == 16 and outputs[0]["logprobs"].shape == outputs[0]["elementwise_loss"].shape


def test_losses_refuse_what_they_do_not_compute():
    for name in ("stable_reinforce", "dro", "gspo", "custom"):
        with pytest.raises(UnsupportedLoss, match="supported: cross_entropy, importance_sampling, ppo, cispo"):
            LossSpec.parse(name, None)
    with pytest.raises(UnsupportedLoss, match="clip_low_threshold"):
        LossSpec.parse("importance_sampling", {"clip_low_threshold": 0.5})
    with pytest.raises(UnsupportedLoss, match="must satisfy"):
        LossSpec.parse("ppo", {"clip_low_threshold": 1.5})
    assert LossSpec.parse("cispo", {"clip_high_threshold": 1.3}).clip_high == pytest.approx(0.3)


def test_a_datum_that_does_not_fit_its_loss_is_refused_before_it_is_queued(shipped):
    base, tokenizer = shipped
    service = TrainingModels(copy.deepcopy(base), tokenizer, lora_alpha=ALPHA, max_rank=8, micro_batch=64)
    spec = LossSpec.parse("importance_sampling", None)

    def datum(**inputs):
        return types.Datum(model_input=types.ModelInput.from_ints([3, 4, 5]), loss_fn_inputs=inputs)

    cases = [(datum(target_tokens=[4, 5, 6], weights=[1.0, 1.0, 1.0]), "lacks"),
             (datum(target_tokens=[4, 5], logprobs=[0.0, 0.0], advantages=[1.0, 1.0]), "shape"),
             (datum(target_tokens=[4, 5, 99999], logprobs=[0.0] * 3, advantages=[1.0] * 3), "vocabulary"),
             (datum(target_tokens=[4, 5, 6], logprobs=[0.0] * 3, advantages=[float("nan")] * 3), "finite")]
    for bad, why in cases:
        with pytest.raises(RequestError, match=why):
            service.rows([bad], spec)
    with pytest.raises(RequestError, match="rank 99"):
        service.create("m", types.LoraConfig(rank=99))
    with pytest.raises(RequestError, match="trains nothing"):
        service.create("m", types.LoraConfig(rank=2, train_attn=False, train_mlp=False, train_unembed=False))


def test_datums_that_begin_alike_are_scored_on_one_cache_as_if_each_ran_whole(shipped):
    from echo2.learner.logprobs import shared_prefix_lengths, target_logprobs

    model, tokenizer = shipped
    prompt = tokenizer("12+34-5=")["input_ids"] * 2
    inputs = [prompt + [5, 6, 7], prompt + [5, 9], prompt[:3] + [8] * 10, [4], prompt + [5, 6, 7, 3]]
    targets = [row[1:] + [12] for row in inputs]
    assert shared_prefix_lengths(inputs) == [len(prompt) + 1] * 2 + [12, 1, len(prompt) + 1]
    results = []
    for share in (True, False):
        model.zero_grad()
        logprobs, mask = target_logprobs(model, inputs, targets, pad_id=tokenizer.pad_token_id, share_prefixes=share)
        (logprobs * torch.linspace(0.5, 1.5, logprobs.shape[1])).sum().backward()
        results.append((logprobs.detach(), mask, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (shared, shared_mask, shared_grads), (whole, whole_mask, whole_grads) = results
    assert torch.equal(shared_mask, whole_mask) and shared_mask.sum() == sum(map(len, inputs))
    assert torch.allclose(shared, whole, atol=2e-5)
    scale = max(float(g.abs().max()) for g in whole_grads)
    gap = max(float((a - b).abs().max()) for a, b in zip(shared_grads, whole_grads, strict=True))
    assert gap < 1e-6 * scale  # float32 rounding of two summation orders (measured 3.1e-5 on gradients up to 102)


def test_two_training_clients_on_one_base_model_step_as_each_would_alone(shipped):
    """Two clients of other shapes, their requests interleaved: each adapter ends where it ends
    trained alone, the other's gradients and steps never reaching it."""
    base, tokenizer = shipped
    spec = LossSpec.parse("importance_sampling", None)
    batches = [datums_of(groups_of(base, tokenizer, noise=0.4, seed=seed), tokenizer) for seed in (1, 2)]
    adam = types.AdamParams(learning_rate=LR)

    def service() -> TrainingModels:
        return TrainingModels(copy.deepcopy(base), tokenizer, lora_alpha=ALPHA, max_rank=8, micro_batch=64)

    alone = service()
    alone.create("a", types.LoraConfig(rank=RANK, seed=1))
    for batch in batches:
        alone.forward_backward("a", alone.rows(batch, spec), spec)
        alone.optim_step("a", adam)
    shared = service()
    first = shared.create("a", types.LoraConfig(rank=RANK, seed=1))
    second = shared.create("b", types.LoraConfig(rank=2, seed=2, train_mlp=False, train_unembed=False))
    for batch in batches:
        shared.forward_backward("a", shared.rows(batch, spec), spec)
        shared.forward_backward("b", shared.rows(batch[::-1], spec), spec)  # between a's backward and its step
        shared.optim_step("b", adam)
        shared.optim_step("a", adam)
    together, by_itself = adapter_of(shared.wrapped, first.adapter), adapter_of(alone.wrapped, "client1")
    assert together.keys() == by_itself.keys()
    assert all(torch.allclose(together[k], by_itself[k], atol=1e-7) for k in together)
    theirs = adapter_of(shared.wrapped, second.adapter)
    assert theirs and all(".self_attn." in k for k in theirs)  # train_mlp / train_unembed off: attention only
    assert shared.clients["a"].steps == shared.clients["b"].steps == 2


def test_an_optimizer_step_that_would_make_the_adapter_non_finite_is_not_applied(shipped):
    """Values the door refuses (:func:`adam_problem`), and a step that still overflows put back whole."""
    base, tokenizer = shipped
    spec = LossSpec.parse("importance_sampling", None)
    models = TrainingModels(copy.deepcopy(base), tokenizer, lora_alpha=ALPHA, max_rank=8, micro_batch=64)
    client = models.create("a", types.LoraConfig(rank=RANK, seed=1))
    for bad, field in ((dict(beta1=float("nan")), "beta1"), (dict(learning_rate=1e30), "learning_rate"),
                       (dict(beta2=1.0), "beta2"), (dict(eps=0.0), "eps"), (dict(grad_clip_norm=-1.0), "grad_clip_norm"),
                       (dict(learning_rate=0.5, weight_decay=1e300), "weight_decay")):
        with pytest.raises(RequestError, match=f"adam_params.{field}="):
            adam_problem(types.AdamParams(**bad), max_learning_rate=1.0)
    batch = datums_of(groups_of(base, tokenizer, noise=0.4, seed=1), tokenizer)
    models.forward_backward("a", models.rows(batch, spec), spec)
    models.optim_step("a", types.AdamParams(learning_rate=LR))
    before = {k: v.clone() for k, v in adapter_of(models.wrapped, client.adapter).items()}
    moments = copy.deepcopy(client.optimizer.state_dict()["state"])
    models.forward_backward("a", models.rows(batch, spec), spec)
    metrics = models.optim_step("a", types.AdamParams(learning_rate=float("inf")))  # past the door
    assert metrics["update_refused:sum"] == 1.0 and client.steps == 1
    after = adapter_of(models.wrapped, client.adapter)
    assert all(torch.equal(after[k], before[k]) for k in before)
    kept = client.optimizer.state_dict()["state"]
    assert all(torch.equal(kept[i]["exp_avg"], moments[i]["exp_avg"]) for i in moments)
