"""A real run directory (a short training run) for the report tests, and the images a page embeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml


def real_run_dir(path: Path, steps: int = 12) -> Path:
    """A synthetic ``echo2 train`` run directory: per-step records, evaluations, intervals, the books."""
    path.mkdir()
    start = 1_800_000_000.0
    records = [{"step": 0, "time": start, "version": 0, "eval_accuracy": 0.40, "eval_sampled_reward": 0.3}]
    timeline = []
    busy = idle = 0.0
    for step in range(1, steps + 1):
        t0 = start + step
        busy, idle = busy + 0.7, idle + 0.3
        timeline += [{"who": "learner", "kind": "train", "start": t0 - 0.7, "end": t0, "version": step},
                     {"who": "local-0", "kind": "generate", "start": t0 - 0.9, "end": t0 - 0.5, "version": step - 1},
                     {"who": "broadcast", "kind": "disseminate", "start": t0, "end": t0 + 0.2, "version": step}]
        record = {"step": step, "time": t0, "version": step, "reward_mean": 0.2 + 0.01 * step,
                  "learner_busy_s": busy, "learner_idle_s": idle, "utilization": busy / (busy + idle),
                  "staleness_count_0": 10, "staleness_count_1": 54, "dissemination_s": 0.2,
                  "dissemination_max_s": 0.2, "cost/rtx4090_usd": 0.001 * step, "cost_learner_usd": 0.002 * step,
                  "cost_usd": 0.003 * step, "cost_centralized_usd": 0.004 * step}
        if step % 4 == 0:
            record.update(eval_accuracy=0.40 + 0.01 * step, eval_sampled_reward=0.3)
        records.append(record)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "timeline.jsonl").write_text("".join(json.dumps(i) + "\n" for i in timeline))
    (path / "reliability.json").write_text(json.dumps({"leases_issued": 50, "leases_completed": 48,
                                                       "leases_expired": 2, "groups_rejected": {"bad_reward": 3},
                                                       "workers_dead": 1}))
    (path / "config.yaml").write_text(yaml.safe_dump({"protocol": "async", "staleness": 1}))
    (path / "summary.txt").write_text("12 steps in 12s | learner utilization 70%\n")
    return path


def images(page: str) -> list[str]:
    return re.findall(r"<img [^>]*src='(data:image/png;base64,[A-Za-z0-9+/=]+)'", page)

