"""The evaluator process of ``eval.where: process``: held-out evaluation off the learner's path.

    python -m echo2.launch.evaluator RUN_DIR     (started by ``echo2 train``, one per run)

It builds the run's policy the way a rollout worker does (the ``hf`` engine: the model of the
run's config, its LoRA adapter, a merged copy to sample from) and its task's held-out prompts,
then evaluates every version the learner leaves in ``RUN_DIR/evals/`` (:mod:`echo2.learner.evaluations`),
oldest first, with the same :func:`echo2.model.evaluation.evaluate` and seed as an inline
evaluation. Each payload is checked against its sha256 before it is loaded. It stops when the
learner leaves a ``stop`` file and nothing is pending, or when its parent is gone.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import torch

from echo2.config import load_config
from echo2.launch.train import run_spec
from echo2.learner.evaluations import POLL_S, result_path, result_to_json
from echo2.model.evaluation import evaluate
from echo2.model.loading import load_tokenizer, pin_cpus
from echo2.rollout.engines.hf import HfEngine
from echo2.tasks import load_task

log = logging.getLogger("echo2")


def pending(folder: Path) -> list[tuple[int, Path]]:
    """The versions waiting for evaluation, oldest first."""
    return sorted((int(path.stem[1:]), path) for path in folder.glob("v*.safetensors"))


def serve(run_dir: Path) -> None:
    config = load_config(run_dir / "config.yaml")
    pin_cpus(config.eval.cpus)
    torch.set_num_threads(config.eval.threads)
    task = load_task(config.task.name, config.task.options)
    examples = task.eval_examples(config.eval.size)
    tokenizer = load_tokenizer(config.model.name)
    engine = HfEngine(run_spec(config, task.max_turns), tokenizer.eos_token_id, tokenizer.pad_token_id,
                      device=config.learner.device)
    folder, parent = run_dir / "evals", os.getppid()
    log.info("evaluator: %d held-out prompts, %d threads on CPUs %s", len(examples), config.eval.threads,
             sorted(os.sched_getaffinity(0)))
    while os.getppid() == parent:
        waiting = pending(folder)
        if not waiting:
            if (folder / "stop").exists():
                return
            time.sleep(POLL_S)
            continue
        version, path = waiting[0]
        started = time.monotonic()
        engine.load(path.read_bytes(), path.with_suffix(".sha256").read_text().strip())
        result = evaluate(engine.sampling_model, tokenizer, task, examples,
                          max_new_tokens=config.rollout.max_new_tokens, temperature=config.rollout.temperature,
                          seed=config.run.seed + version, shown=config.eval.show, sampled=config.eval.sampled)
        target = result_path(folder, version)
        target.with_suffix(".partial").write_text(json.dumps(result_to_json(result)))
        target.with_suffix(".partial").rename(target)
        path.unlink()
        path.with_suffix(".sha256").unlink()
        log.info("evaluator: v%d held-out accuracy %.1f%% in %.1f s", version, 100 * result.accuracy,
                 time.monotonic() - started)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(Path(sys.argv[1]))
