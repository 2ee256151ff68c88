"""The data-parallel learner: 2 gloo processes make the same update as 1 process on the same batch.

Rank 0 leads exactly as in ``echo2 train`` under torchrun (``Learner.step`` hands the batch to
the follower, which runs :func:`echo2.learner.distributed.follow`); both hold half of the
sequences. Compared with one process: every parameter after the step, AdamW's first moments
and the step's loss and gradient norm. The learning rate is large enough that the update
itself (not just the weights) is checked: a rank training on its half alone would be off by a
wide margin.
"""

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sampled_groups import sampled_groups

from echo2.config import load_config
from echo2.learner.distributed import Shard, announce, follow
from echo2.learner.trainer import Learner
from echo2.model.loading import load_model, load_tokenizer, resolve_model_path

OVERRIDES = ["learner.lr=1e-3", "rollout.group_size=4", "learner.micro_batch=3", "learner.minibatches=2"]


def _learner(shard: Shard = Shard()) -> Learner:
    config = load_config(overrides=OVERRIDES)
    model, tokenizer = load_model(config.model.name), load_tokenizer(config.model.name)
    return Learner(model, tokenizer, config.learner, config.rollout, model_dir=resolve_model_path(config.model.name),
                   shard=shard)


def _step(learner: Learner, groups) -> dict:
    metrics = learner.step(groups, version=0)
    return {"parameters": {n: p.detach().clone() for n, p in learner.policy.named_parameters()},
            "exp_avg": [s["exp_avg"] for s in learner.optimizer_state()["state"].values()], "metrics": metrics}


def _rank(rank: int, world: int, port: int, sharding: str, groups, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        shard = Shard(rank=rank, world=world, sharding=sharding)
        learner = _learner(shard)
        if shard.leader:
            torch.save(_step(learner, groups), out)
            announce(shard, "stop")
        else:
            follow(learner, shard)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sharding", ["replicate", "fsdp"])
def test_two_gloo_processes_make_the_single_process_update(tmp_path: Path, sharding: str):
    torch.manual_seed(0)
    learner = _learner()
    rewards = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0],
               [1.0, 0.0, 1.0, 0.0]]
    groups = sampled_groups(learner.model, learner.tokenizer, len(rewards), 4, lambda g: rewards[g])
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    alone = _step(learner, groups)
    out = tmp_path / "rank0.pt"
    mp.spawn(_rank, args=(2, _free_port(), sharding, groups, str(out)), nprocs=2, join=True)
    together = torch.load(out, weights_only=False)
    moved = max(float((alone["parameters"][n] - before[n]).abs().max()) for n in before)
    assert moved > 1e-4  # the step really moved the weights ...
    for name, value in alone["parameters"].items():  # ... and both runs moved them the same way
        if name.endswith("k_proj.bias"):
            # a key bias shifts every score of a query alike, which softmax ignores: its gradient
            # is 0 up to float noise, and AdamW turns that noise into steps of +-lr whose sign
            # depends on summation order, so no tolerance below lr can compare it
            continue
        assert torch.allclose(together["parameters"][name], value, rtol=0, atol=1e-6), name
    for mine, theirs in zip(alone["exp_avg"], together["exp_avg"]):  # float-summation noise only
        assert float((theirs - mine).abs().max()) <= 1e-4 * float(mine.abs().max())
    for key in ("loss", "grad_norm", "ratio_mean", "trained_sequences", "reward_mean"):  # loss: a sum that cancels
        assert together["metrics"][key] == pytest.approx(alone["metrics"][key], rel=1e-5, abs=1e-6), key


def test_torchrun_launch_trains_with_fsdp_and_only_rank_0_serves(tmp_path: Path):
    """``torchrun ... -m echo2.cli train``: rank 0 hosts the coordinator, rank 1 follows; FSDP2 on gloo."""
    import json
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    command = [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "echo2.cli", "train", "run.steps=3",
               "eval.size=20", "eval.every=3", "learner.groups_per_step=8", "rollout.groups_per_lease=4",
               "telemetry.tensorboard=false", "telemetry.progress=false", "workers.count=1", "learner.sharding=fsdp",
               f"run.dir={tmp_path}", "run.name=run"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["version"] for r in records if "reward_mean" in r] == [1, 2, 3]
    assert result.stderr.count("coordinator at http") == 1  # one coordinator: rank 0's
    assert (tmp_path / "run" / "checkpoints" / "step_000003" / "model.safetensors").exists()
