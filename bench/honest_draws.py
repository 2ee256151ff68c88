"""Honest runs with the draw check on: is any honest worker quarantined, and how near do their tokens come to the tolerance?

    python bench/honest_draws.py [--quick] [--out DIR] [--minutes M]

Each arm is ``echo2 train`` in a subprocess, as a user starts it, with the draw check on (its
default, ``verification.check_draws``) and the tolerance a run sets for its worker dtype:

* ``default``: ``configs/default.yaml`` (the shipped tiny model, float32 workers), its 200 steps;
* ``smollm2-bf16``: the SmolLM2 recipe (``configs/smollm2-135m-chain-sum.yaml``, bfloat16 workers),
  stopped after ``--minutes`` of training (``run.max_minutes``), its held-out evaluations cut to
  50 prompts (they check nothing the draws depend on);
* ``smollm2-f32``: the same recipe with ``model.dtype=float32``.

``--quick``: the default config for 20 steps only. Columns, from each run's directory:
``audited_groups`` (all its steps), ``draw_gap_max`` (the farthest any audited token's draw fell
outside its interval, ``audit_draw_gap_max``: 0 is inside), ``draw_tolerance`` (what a quarantine
needs), ``margin`` (the tolerance over that gap) and ``workers_quarantined`` (each a false one: every
worker here is honest).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.model.draws import draw_tolerance  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPE = str(ROOT / "configs" / "smollm2-135m-chain-sum.yaml")


def arms(quick: bool, minutes: float) -> dict[str, tuple[str, list[str]]]:
    """Arm name -> (config file, overrides)."""
    if quick:
        return {"default": (str(ROOT / "configs" / "default.yaml"), ["run.steps=20"])}
    return {"default": (str(ROOT / "configs" / "default.yaml"), []),
            "smollm2-bf16": (RECIPE, [f"run.max_minutes={minutes:g}", "eval.size=50"]),
            "smollm2-f32": (RECIPE, [f"run.max_minutes={minutes:g}", "eval.size=50", "model.dtype=float32"])}


def run_arm(name: str, config: str, overrides: list[str], out: Path) -> dict[str, Any]:
    started = time.time()
    command = [sys.executable, "-m", "echo2.cli", "train", "--config", config, f"run.dir={out}", f"run.name={name}",
               "verification.check_draws=true", *overrides]
    subprocess.run(command, check=True, cwd=ROOT, timeout=3600)
    run_dir = out / name
    resolved = load_config(run_dir / "config.yaml")
    records = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    reliability = json.loads((run_dir / "reliability.json").read_text())
    tolerance = draw_tolerance(resolved.verification.draw_tolerance, resolved.model.dtype)
    gap = max((r.get("audit_draw_gap_max", 0.0) for r in records), default=0.0)
    return {"run": name, "model": resolved.model.name, "dtype": resolved.model.dtype, "steps": len(records),
            "audited_groups": sum(r.get("audited_groups", 0) for r in records), "draw_gap_max": gap,
            "draw_tolerance": tolerance, "margin": tolerance / gap if gap > 0 else None,
            "workers_quarantined": reliability["workers_quarantined"], "wall_s": time.time() - started}


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--minutes", type=float, default=10.0, help="training minutes of each SmolLM2 run")

    args = parse_args(__doc__.splitlines()[0], "bench/out/honest-draws", options)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run_arm(name, config, overrides, args.out.resolve())
            for name, (config, overrides) in arms(args.quick, args.minutes).items()]
    print(format_table(rows, ["run", "dtype", "steps", "audited_groups", "draw_gap_max", "draw_tolerance", "margin",
                              "workers_quarantined"]))
    path = write_results(args.out, rows, {"quick": args.quick, "minutes": args.minutes},
                         models=sorted({row["model"] for row in rows}))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
