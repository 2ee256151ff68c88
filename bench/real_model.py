"""A real pretrained model end to end: the SmolLM2 recipe's run, and what sharing a group's prompt buys.

    python bench/real_model.py [--quick] [--out DIR] [--config RECIPE] [--run RUN_DIR] [--peak-rss-bytes N]

1. **The run.** Without ``--run`` this trains ``--config`` (default
   ``configs/smollm2-135m-chain-sum.yaml``) with ``echo2 train`` in a subprocess and polls the
   resident memory of that process and all its children (learner + workers) every 0.5 s; with
   ``--run`` it reads a finished run directory instead (``--peak-rss-bytes``: the peak measured
   the same way while it ran). From the run: its printed summary lines, resolved config and wall
   time, and a plot of held-out accuracy, sampled reward and the share of well-formed answers
   against wall time.
2. **Shared prompt vs not, side by side** (same process, same weights, alternating rounds, on
   the recipe's own model, dtype, adapter, prompts, group size and lease size):
   * a worker's generation of one lease with its engine (LoRA merged as workers sample), each
     distinct prompt prefilled once (:func:`echo2.model.tokens.prefill`) vs once per row: samples/s
     and generated tokens/s;
   * the learner's forward + backward over one step's sequences (``groups_per_step`` x G, under
     the learner's autocast): seconds, prompt shared vs not.

3. **What changed** (with a run): the base model and the run's last checkpoint answer the 200
   held-out questions greedily; each answer is sorted by its form — ``number only`` (the asked
   format), ``equation`` (restates the sum, ``a + b = c``), ``sentence`` ("The answer … is c"),
   ``other`` — with the share of answers of each form and the accuracy within it, so that a gain
   from changing route or format is told apart from a gain in getting sums right.

``--quick`` (the test suite's variant) skips the run and measures 2 rounds on the shipped tiny model.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
from common import format_table, write_results  # noqa: E402

RECIPE = "configs/smollm2-135m-chain-sum.yaml"


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=RECIPE, help="recipe to run and measure")
    parser.add_argument("--run", type=Path, default=None, help="a finished run of the recipe (skip training)")
    parser.add_argument("--peak-rss-bytes", type=int, default=None, help="peak RSS measured while --run ran")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per layout (default 4; quick 2)")
    parser.add_argument("--wall-s", type=float, default=None, help="process wall time of --run, when measured")


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        total += rss_pages * os.sysconf("SC_PAGE_SIZE")
    return total


def train_and_watch(config: str, out: Path) -> tuple[Path, int, float]:
    """Run ``echo2 train --config config`` into ``out``; its run directory, the peak tree RSS, the wall time."""
    name = time.strftime("real-%Y%m%d-%H%M%S")
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "echo2.cli", "train", "--config", config,
                                f"run.dir={out}", f"run.name={name}"])
    peak = 0

    def poll() -> None:
        nonlocal peak
        while process.poll() is None:
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.5)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    if process.wait() != 0:
        raise SystemExit(f"echo2 train failed with exit code {process.returncode}")
    watcher.join()
    return out / name, peak, time.monotonic() - started


def layout_rows(config_path: str | None, rounds: int, overrides: list[str]) -> list[dict[str, Any]]:
    """Worker generation and learner forward+backward, prompt shared vs not, alternating rounds."""

    from echo2.config import load_config
    from echo2.launch.ranks import build_learner, load_policy
    from echo2.launch.train import run_spec
    from echo2.learner.distributed import Shard
    from echo2.learner.logprobs import completion_scores
    from echo2.model.draws import Draws
    from echo2.model.loading import load_tokenizer, pin_threads
    from echo2.model.sampling import sample
    from echo2.rollout.engines.hf import HfEngine
    from echo2.tasks import load_task

    config = load_config(config_path, overrides)
    pin_threads(config.workers.threads)
    tokenizer = load_tokenizer(config.model.name)
    task = load_task(config.task.name, config.task.options)
    engine = HfEngine(run_spec(config), tokenizer.eos_token_id, tokenizer.pad_token_id)
    group = config.rollout.group_size
    stream = task.train_examples(config.run.seed)
    common_args = dict(max_new_tokens=config.rollout.max_new_tokens, eos_id=tokenizer.eos_token_id,
                       pad_id=tokenizer.pad_token_id, temperature=config.rollout.temperature)
    generation: dict[bool, list[tuple[float, int, int]]] = {True: [], False: []}
    for _, share in itertools.product(range(rounds), (True, False)):
        examples = list(itertools.islice(stream, config.lease_groups))
        prompts = [tokenizer(e.prompt)["input_ids"] for e in examples for _ in range(group)]
        started = time.perf_counter()
        samples = sample(engine.sampling_model, prompts, draws=Draws.seeded(len(prompts), len(prompts)),
                         share_prompts=share, **common_args)
        generation[share].append((time.perf_counter() - started, len(prompts), samples.num_tokens))
    prompt_tokens, lease_rows = sum(len(p) for p in prompts) / len(prompts), len(prompts)

    learner = build_learner(config, load_policy(config, config.model.name), tokenizer, None, Shard())
    pin_threads(config.learner.threads)
    examples = list(itertools.islice(stream, config.learner.groups_per_step))
    prompts = [tokenizer(e.prompt)["input_ids"] for e in examples for _ in range(group)]
    completions = sample(engine.sampling_model, prompts, draws=Draws.seeded(0, len(prompts)),
                         **common_args).completion_ids
    training: dict[bool, list[float]] = {True: [], False: []}
    for _, share in itertools.product(range(rounds), (True, False)):
        started = time.perf_counter()
        with learner.precision():
            scores = completion_scores(learner.model, prompts, completions, pad_id=tokenizer.pad_token_id,
                                       temperature=config.rollout.temperature, share_prompts=share)
        scores.logprobs.sum().backward()
        learner.model.zero_grad(set_to_none=True)
        training[share].append(time.perf_counter() - started)

    rows = []
    for share in (True, False):
        seconds = sum(t for t, _, _ in generation[share])
        rows.append({"prompt": "shared per group" if share else "per row",
                     "worker_samples_per_s": sum(n for _, n, _ in generation[share]) / seconds,
                     "worker_tokens_per_s": sum(k for _, _, k in generation[share]) / seconds,
                     "learner_fwd_bwd_s": sum(training[share]) / len(training[share]),
                     "lease_rows": lease_rows, "step_rows": len(prompts), "prompt_tokens": prompt_tokens})
    shared, plain = rows
    for key in ("worker_samples_per_s", "worker_tokens_per_s"):
        shared[f"{key}_x"] = shared[key] / plain[key]
    shared["learner_speedup_x"] = plain["learner_fwd_bwd_s"] / shared["learner_fwd_bwd_s"]
    return rows


ANSWER_FORMS = {
    "number only": re.compile(r"\s*-?\d+\.?\s*"),
    "equation": re.compile(r"\s*-?\d+\s*[-+]\s*-?\d+\s*=\s*-?\d+.*", re.S),
    "sentence": re.compile(r".*\banswer\b.*", re.S | re.I),
}


def answer_form(completion: str) -> str:
    return next((name for name, pattern in ANSWER_FORMS.items() if pattern.fullmatch(completion)), "other")


def form_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Greedy held-out answers of the base model and of the run's last checkpoint, by form."""
    from echo2.config import load_config
    from echo2.launch.ranks import load_policy
    from echo2.learner.checkpoint import latest_resumable
    from echo2.learner.precision import ComputePrecision
    from echo2.model.evaluation import evaluate
    from echo2.model.loading import load_tokenizer, pin_threads
    from echo2.model.lora import for_sampling
    from echo2.tasks import load_task

    config = load_config(run_dir / "config.yaml")
    pin_threads(2)
    task = load_task(config.task.name, config.task.options)
    examples = task.eval_examples(config.eval.size)
    tokenizer = load_tokenizer(config.model.name)
    rows = []
    for label, weights in (("base model", config.model.name), ("last checkpoint", str(latest_resumable(run_dir)))):
        model = for_sampling(load_policy(config, weights))
        with ComputePrecision(config.model.dtype)():
            result = evaluate(model, tokenizer, task, examples, max_new_tokens=config.rollout.max_new_tokens,
                              shown=len(examples))
        forms: dict[str, list[float]] = {name: [] for name in [*ANSWER_FORMS, "other"]}
        for _, completion, reward in result.examples:
            forms[answer_form(completion)].append(reward >= 1.0)
        for name, verdicts in forms.items():
            rows.append({"model": label, "form": name, "share": len(verdicts) / len(examples),
                         "accuracy_within": sum(verdicts) / len(verdicts) if verdicts else None,
                         "example": next((c for _, c, _ in result.examples if answer_form(c) == name), None)})
    return rows


def plot_run(run_dir: Path, out: Path) -> Path:
    """Held-out accuracy, sampled reward and well-formed share of the run against wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from echo2.telemetry.metrics import read_jsonl

    records = read_jsonl(run_dir / "metrics.jsonl")
    evals = [r for r in records if "eval_accuracy" in r]
    clock = {r["version"]: r.get("learner_busy_s", 0) + r.get("learner_idle_s", 0) + r.get("startup_s", 0)
             for r in records if "learner_busy_s" in r}
    minutes = [clock.get(r["version"], 0.0) / 60 for r in evals]
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.plot(minutes, [100 * r["eval_accuracy"] for r in evals], "o-", label="held-out greedy accuracy")
    axis.plot(minutes, [100 * r["eval_sampled_reward"] for r in evals], "s-", label="held-out sampled reward")
    if all("eval_well_formed" in r for r in evals):
        axis.plot(minutes, [100 * r["eval_well_formed"] for r in evals], "^--", label="well-formed answers")
    axis.set_xlabel("training minutes (learner busy + waiting; evaluations excluded)")
    axis.set_ylabel("% of 200 held-out prompts")
    axis.set_title(run_dir.name)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    path = out / "real-model.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def run_figures(run_dir: Path) -> dict[str, Any]:
    """The run's figures as numbers (the summary lines say the same in words): every evaluation,
    the first and final accuracy (final: mean of the last 3 evals, as the summary), throughput,
    learner utilization and step times."""
    from echo2.telemetry.metrics import read_jsonl

    records = read_jsonl(run_dir / "metrics.jsonl")
    start = records[0]["time"]
    evals = [{"version": r["version"], "s": r["time"] - start, "accuracy": r["eval_accuracy"],
              "sampled_reward": r["eval_sampled_reward"]} for r in records if "eval_accuracy" in r]
    steps = [r for r in records if "loss" in r]
    wall = steps[-1]["time"] - start
    gaps = sorted(b["time"] - a["time"] for a, b in zip(steps, steps[1:]))
    last = evals[1:][-3:] or evals[:1]
    return {"evals": evals, "acc_start": evals[0]["accuracy"],
            "acc_final": sum(e["accuracy"] for e in last) / len(last),
            "sampled_start": evals[0]["sampled_reward"],
            "sampled_final": sum(e["sampled_reward"] for e in last) / len(last), "steps": len(steps),
            "samples_per_s": sum(r["samples"] for r in steps) / wall,
            "learner_util": steps[-1]["learner_busy_s"] / wall,
            "step_s_median": gaps[len(gaps) // 2] if gaps else None,
            "step_s_p90": gaps[int(0.9 * len(gaps))] if gaps else None}


def run_meta(run_dir: Path, peak_rss: int | None, wall_s: float | None) -> dict[str, Any]:
    from echo2.model.sources import model_fingerprint

    config_text = (run_dir / "config.yaml").read_text()
    import yaml

    config = yaml.safe_load(config_text)
    log = (run_dir / "train.log").read_text().splitlines()
    stamp = "%Y-%m-%d %H:%M:%S"
    logged = time.mktime(time.strptime(log[-1][:19], stamp)) - time.mktime(time.strptime(log[0][:19], stamp))
    return {
        "run_dir": str(run_dir), "summary": (run_dir / "summary.txt").read_text().splitlines(),
        "config": config, "model_sha256_16": model_fingerprint(config["model"]["name"]),
        "wall_s": wall_s, "train_log_span_s": logged, "peak_rss_bytes": peak_rss,
        "peak_rss_gib": None if peak_rss is None else peak_rss / 2**30, "figures": run_figures(run_dir),
    }


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/real_model", _options)
    rounds = args.rounds or (2 if args.quick else 4)
    meta: dict[str, Any] = {"quick": args.quick}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        rows = layout_rows(None, rounds, ["rollout.groups_per_lease=2", "learner.groups_per_step=2"])
    else:
        run_dir, peak, wall = ((args.run, args.peak_rss_bytes, args.wall_s) if args.run
                               else train_and_watch(args.config, args.out))
        meta.update(run_meta(run_dir, peak, wall))
        meta["plot"] = str(plot_run(run_dir, args.out))
        meta["answer_forms"] = form_rows(run_dir)
        rows = layout_rows(args.config, rounds, [])
    columns = ["prompt", "lease_rows", "step_rows", "prompt_tokens", "worker_samples_per_s", "worker_tokens_per_s", "learner_fwd_bwd_s",
               "worker_samples_per_s_x", "learner_speedup_x"]
    for line in meta.get("summary", []):
        print(line)
    if "answer_forms" in meta:
        print(format_table(meta["answer_forms"], ["model", "form", "share", "accuracy_within", "example"]))
    print(format_table(rows, columns))
    from echo2.config import load_config

    model = load_config(None if args.quick else args.config).model.name  # quick: the shipped model
    print(f"wrote {write_results(args.out, rows, meta, models=(model,))}")


if __name__ == "__main__":
    main()
