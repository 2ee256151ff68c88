"""fp32 master weights: a bf16 model trained at a small learning rate really moves.

AdamW's first step moves every weight with a non-zero gradient by about the learning rate. At lr
1e-6 that is far below half a bf16 step for weights of ~0.03 (~1e-4), so parameters held in bf16
do not change at all; held in fp32 (``learner.master_dtype``) while computing in bf16
(``model.dtype``), they do.
"""

import torch

from echo2.config import load_config
from echo2.exchange import Group
from echo2.learner.precision import ComputePrecision, hold_master_weights
from echo2.learner.trainer import Learner
from echo2.model.draws import Draws
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.sampling import sample
from echo2.tasks import ArithmeticTask


def one_step(master_dtype: str) -> tuple[dict[str, torch.Tensor], Learner]:
    """The weights before and the learner after one lr-1e-6 step of a bf16 model."""
    torch.manual_seed(0)
    config = load_config(overrides=["model.dtype=bfloat16", f"learner.master_dtype={master_dtype}",
                                    "learner.lr=1e-6", "learner.warm_start_optimizer=false"])
    tokenizer = load_tokenizer(config.model.name)
    model = hold_master_weights(load_model(config.model.name, master_dtype), master_dtype)
    learner = Learner(model, tokenizer, config.learner, config.rollout, compute_dtype="bfloat16")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    examples = list(zip(range(8), ArithmeticTask().train_examples(seed=1)))
    groups = []
    for slot, example in examples:
        prompts = [tokenizer(example.prompt)["input_ids"]] * 4
        with learner.precision():
            samples = sample(model, prompts, max_new_tokens=6, eos_id=tokenizer.eos_token_id,
                             pad_id=tokenizer.pad_token_id, draws=Draws.seeded(slot, len(prompts)))
        groups.append(Group(slot=slot, example=example, version=0, worker_id="test",
                            token_ids=samples.completion_ids, logprobs=samples.logprobs,
                            rewards=[1.0, 0.0, 1.0, 0.0]))
    learner.step(groups, version=0)
    return before, learner


def changed_share(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    moved = total = 0
    for name, parameter in model.named_parameters():
        moved += int((parameter.detach().float() != before[name].float()).sum())
        total += parameter.numel()
    return moved / total


def test_fp32_master_weights_move_under_a_tiny_learning_rate_where_bf16_ones_do_not():
    before, learner = one_step("float32")
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    master_share = changed_share(before, learner.model)
    assert master_share > 0.5
    before, learner = one_step("bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in learner.model.parameters())
    assert changed_share(before, learner.model) < 0.2 * master_share


def test_compute_precision_autocasts_only_below_float32():
    linear = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with ComputePrecision("bfloat16")():
        assert linear(x).dtype == torch.bfloat16
    with ComputePrecision("float32")():
        assert linear(x).dtype == torch.float32
    assert linear.weight.dtype == torch.float32  # autocast never touches the master weights


def test_master_weights_cover_trainable_parameters_only():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)).to(torch.bfloat16)
    model[0].requires_grad_(False)
    hold_master_weights(model, "float32")
    assert model[0].weight.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32
