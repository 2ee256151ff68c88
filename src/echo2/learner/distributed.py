"""A data-parallel learner over ``torch.distributed``: rank 0 leads, the other ranks follow.

Launched with torchrun (``torchrun --nproc-per-node N -m echo2.cli train ...``), every rank
builds the same learner. Rank 0 alone hosts the coordinator, takes batches, verifies,
evaluates, publishes and checkpoints; it hands every step's batch to the other ranks
(``broadcast_object_list``) and each rank trains on its share of the step's sequences — every
N-th sequence that runs through the model — with the step's *global* loss normalisers, so the
sum of the ranks' gradients is the single-process gradient and every rank applies the same
AdamW update. Two ways to hold the model (``learner.sharding``):

* ``replicate`` (DDP-style) — each rank holds the whole model and optimizer; after an update's
  micro-batches one all-reduce of a flat buffer sums the gradients, as DDP's gradient buckets
  do (Li et al., "PyTorch Distributed", VLDB 2020, arXiv 2006.15704). Works on CPU (gloo) and
  GPU (NCCL).
* ``fsdp`` — FSDP2 (``torch.distributed.fsdp.fully_shard``; Zhao et al., "PyTorch FSDP",
  arXiv 2304.11277) shards parameters, gradients and AdamW states: one FSDP unit per decoder
  layer plus the root. Its gradient reduce-scatter averages over ranks, so each rank's loss is
  scaled by the world size before backward (:meth:`Shard.scaled`) to make it a sum. FSDP's
  collectives need every rank to run the same passes, so a rank short of sequences runs empty
  ones (:meth:`Shard.padded`). Rank 0 keeps an unsharded copy of the policy for evaluation,
  verification and publishing, refreshed from the shards after every step.

With one process (no torchrun) :class:`Shard` is inert: the learner runs exactly as before.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

from echo2.model.loading import resolve_device

Sharding = Literal["replicate", "fsdp"]


@dataclass(frozen=True)
class Shard:
    """This process's place among the learner's ranks (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world: int = 1
    sharding: Sharding = "replicate"

    @property
    def fsdp(self) -> bool:
        return self.world > 1 and self.sharding == "fsdp"

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def mine(self, rows: list[int]) -> list[int]:
        """This rank's share of ``rows`` (every world-th: balanced within any contiguous slice)."""
        return rows[self.rank :: self.world]

    def padded(self, batches: list[list[int]]) -> list[list[int]]:
        """``batches`` topped up with empty ones to the busiest rank's count under FSDP."""
        if not self.fsdp:
            return batches
        count = torch.tensor([len(batches)])
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return batches + [[] for _ in range(int(count) - len(batches))]

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to back-propagate: FSDP averages gradients over ranks where the global loss
        needs their sum (a custom divide factor would need a PREMUL_SUM, which gloo lacks)."""
        return loss * self.world if self.fsdp else loss

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.world == 1:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def sum_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """``replicate``: sum the ranks' gradients (one flat all-reduce). A parameter no rank has a
        gradient for keeps none, as in a single process; a rank that ran nothing adds zeros."""
        if self.world == 1 or self.fsdp:
            return
        present = torch.tensor([float(p.grad is not None) for p in parameters])
        dist.all_reduce(present)
        summed = [p for p, seen in zip(parameters, present.tolist()) if seen]
        if not summed:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in summed])
        dist.all_reduce(flat)
        for p, part in zip(summed, flat.split([p.numel() for p in summed])):
            p.grad = part.view_as(p).clone()

    def full(self, tensor: torch.Tensor) -> torch.Tensor:
        """The whole of a sharded tensor (a collective under FSDP); other tensors as they are."""
        return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor

    def like(self, tensor: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
        """A whole ``tensor`` sharded as ``parameter`` is (each rank slices its own copy)."""
        if not hasattr(parameter, "device_mesh"):
            return tensor
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(tensor.to(parameter.device), parameter.device_mesh, parameter.placements,
                                 src_data_rank=None)


def place_state(state: dict[int, dict[str, torch.Tensor]], parameters: list[torch.nn.Parameter],
                shard: Shard) -> dict[int, dict[str, torch.Tensor]]:
    """Whole optimizer states (per parameter index) sharded like their parameters under FSDP."""
    if not shard.fsdp:
        return state
    return {i: {key: shard.like(value, parameters[i]) if value.shape == parameters[i].shape else value
                for key, value in entry.items()} for i, entry in state.items()}


def start(sharding: Sharding) -> Shard:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), else a single-process shard."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Shard()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return Shard(rank=dist.get_rank(), world=dist.get_world_size(), sharding=sharding)


def learner_device(setting: str) -> torch.device:
    """``learner.device`` on this rank: ``cuda`` means the rank's own GPU under torchrun."""
    return resolve_device(setting, int(os.environ.get("LOCAL_RANK", "0")))


def shard_model(model: torch.nn.Module, shard: Shard) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """``(model to train, full policy copy on rank 0 or None)``; the same model twice unless FSDP."""
    if not shard.fsdp:
        return model, model
    from torch.distributed.fsdp import fully_shard

    policy = copy.deepcopy(model) if shard.leader else None
    for module in [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]:
        fully_shard(module)
    fully_shard(model)
    return model, policy


def idle_pass(model: torch.nn.Module, backward: bool) -> None:
    """An empty forward (and backward) so that an FSDP rank with nothing to do joins the collectives."""
    device = next(model.parameters()).device
    loss = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device)).logits.sum() * 0.0
    if backward:
        loss.backward()


@torch.no_grad()
def refresh_policy(model: torch.nn.Module, policy: torch.nn.Module | None, shard: Shard) -> None:
    """FSDP: gather the trained shards into rank 0's policy copy (every rank takes part)."""
    if not shard.fsdp:
        return
    targets = dict(policy.named_parameters()) if policy is not None else {}
    for name, parameter in model.named_parameters():
        whole = shard.full(parameter)
        if name in targets:
            targets[name].copy_(whole)


def follow(learner: Any, shard: Shard) -> None:
    """The loop of ranks > 0: do what rank 0 announces until it says stop."""
    while True:
        command, arguments = shard.broadcast(None)
        if command == "stop":
            return
        getattr(learner, command)(*arguments)


def announce(shard: Shard, command: str, *arguments: Any) -> None:
    """Rank 0: have the followers call ``learner.<command>(*arguments)`` (no-op alone)."""
    if shard.world > 1 and shard.leader:
        shard.broadcast((command, arguments))
