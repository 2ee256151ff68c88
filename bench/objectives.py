"""Which objective, for the same wall time? GRPO, DAPO, GSPO, GRPO+EchoClip and DAPO+EchoClip, over seeds and two difficulties.

    python bench/objectives.py [--quick] [--out DIR] [--seeds N] [--budget-s SECONDS]
                               [--difficulties default,subtraction] [--objectives grpo,dapo,...]

Every run is a real ``echo2 train`` (learner + coordinator in this process, two worker
processes) on the shipped model, with everything but the objective and the seed at its default,
stopped by the same wall-time budget (``run.max_minutes``), so an objective that spends more
samples or learner time per step (DAPO's dynamic sampling, EchoClip's entropy pass) pays for it
in steps. Two difficulties:

* ``default``: ``a ± b ± c``; the terse route is right on every ``a + …`` prompt, so groups
  become all-correct early;
* ``subtraction``: ``a - b - c`` only, where the terse route slips (24.7% greedy at the start vs
  56.2%), so groups become all-correct only late in training: where EchoClip should matter most.

Reported per difficulty and objective (mean ± std over seeds): final held-out greedy accuracy
(mean of the last 3 evals), the mean over all evals (area under the curve: speed), the steps
the budget bought, the share of all-correct groups over the last 20 steps, EchoClip tokens per
step, and the final accuracy minus GRPO's in points: the mean of the per-seed differences (runs
paired by seed) with the half-width of its 95% Student-t interval (``final_vs_grpo_ci95``). Under DAPO the all-correct share counts the
groups it trained on, after dynamic sampling filtered the degenerate ones (hence 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import eval_curve, format_table, mean_ci95, mean_std, parse_args, step_means, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402

DIFFICULTIES: dict[str, list[str]] = {
    "default": [],
    "subtraction": ['task.options.operators="-"'],
}
OBJECTIVES: dict[str, list[str]] = {
    "grpo": ["learner.loss=grpo"],
    "dapo": ["learner.loss=dapo"],
    "gspo": ["learner.loss=gspo"],
    "grpo+echoclip": ["learner.loss=grpo", "learner.echoclip.enabled=true"],
    "dapo+echoclip": ["learner.loss=dapo", "learner.echoclip.enabled=true"],
}


def add_options(parser) -> None:
    parser.add_argument("--seeds", type=int, default=3, help="seeds per objective and difficulty")
    parser.add_argument("--budget-s", type=float, default=80.0, help="wall-time budget of each run, seconds")
    parser.add_argument("--difficulties", default=",".join(DIFFICULTIES), help="comma-separated subset")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help="comma-separated subset")


def run_one(args, difficulty: str, objective: str, seed: int) -> dict:
    name = f"{difficulty}-{objective}-seed{seed}"
    print(f"== {name}", flush=True)
    budget = ["run.steps=4", "eval.every=2", "eval.size=50"] if args.quick else [
        "run.steps=100000", f"run.max_minutes={args.budget_s / 60}", "eval.every=10", "eval.size=300"]
    config = load_config(overrides=[
        *DIFFICULTIES[difficulty], *OBJECTIVES[objective], *budget, f"run.seed={seed}", "eval.show=0",
        f"run.dir={args.out / 'runs'}", f"run.name={name}", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0",
    ])
    summary = run_training(config)
    curve = eval_curve(summary.run_dir)
    late = step_means(summary.run_dir, ["degenerate_all_correct_fraction", "echoclip_tokens"], last=20)
    return {
        "difficulty": difficulty, "objective": objective, "seed": seed, "steps": summary.result.steps,
        "wall_s": summary.result.wall_seconds, "acc_start": summary.accuracy_before,
        "acc_final": summary.accuracy_after, "acc_auc": sum(p["accuracy"] for p in curve) / len(curve),
        "all_correct_late": late["degenerate_all_correct_fraction"],
        "echoclip_tokens_per_step": late["echoclip_tokens"], "curve": curve, "run_dir": str(summary.run_dir),
    }


def aggregate(runs: list[dict]) -> list[dict]:
    """One row per (difficulty, objective): mean ± std over seeds, and the final accuracy vs GRPO's."""
    rows = []
    for difficulty in dict.fromkeys(r["difficulty"] for r in runs):
        group = [r for r in runs if r["difficulty"] == difficulty]
        for objective in dict.fromkeys(r["objective"] for r in group):
            seeds = [r for r in group if r["objective"] == objective]
            final, final_std = mean_std([r["acc_final"] for r in seeds])
            auc, auc_std = mean_std([r["acc_auc"] for r in seeds])
            clip_tokens = [r["echoclip_tokens_per_step"] for r in seeds if r["echoclip_tokens_per_step"] is not None]
            rows.append({
                "difficulty": difficulty, "objective": objective, "seeds": len(seeds),
                "steps": mean_std([r["steps"] for r in seeds])[0],
                "acc_start": mean_std([r["acc_start"] for r in seeds])[0],
                "acc_final": final, "acc_final_std": final_std, "acc_auc": auc, "acc_auc_std": auc_std,
                "all_correct_late": mean_std([r["all_correct_late"] or 0.0 for r in seeds])[0],
                "echoclip_tokens_per_step": mean_std(clip_tokens)[0] if clip_tokens else None,
            })
        grpo = {r["seed"]: r["acc_final"] for r in group if r["objective"] == "grpo"}
        for row in rows:
            if row["difficulty"] != difficulty or not grpo:
                continue
            # paired by seed (same prompts and sampling seed): the mean difference and its 95% interval
            paired = [100 * (r["acc_final"] - grpo[r["seed"]]) for r in group
                      if r["objective"] == row["objective"] and r["seed"] in grpo]
            row["final_vs_grpo_points"], row["final_vs_grpo_ci95"] = mean_ci95(paired)
    return rows


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    difficulties = list(dict.fromkeys(r["difficulty"] for r in runs))
    fig, axes = plt.subplots(2, len(difficulties), figsize=(6.5 * len(difficulties), 8), squeeze=False)
    for column, difficulty in enumerate(difficulties):
        accuracy, degenerate = axes[0][column], axes[1][column]
        for k, objective in enumerate(dict.fromkeys(r["objective"] for r in runs)):
            seeds = [r for r in runs if r["difficulty"] == difficulty and r["objective"] == objective]
            color, style = f"C{k}", "--" if "echoclip" in objective else "-"
            for i, run in enumerate(seeds):
                accuracy.plot([p["step"] for p in run["curve"]], [p["accuracy"] for p in run["curve"]], style,
                              color=color, alpha=0.8, label=objective if i == 0 else None)
                fraction = _all_correct_by_step(Path(run["run_dir"]))
                degenerate.plot(*zip(*fraction), style, color=color, alpha=0.6,
                                label=objective if i == 0 else None)
        accuracy.set_title(f"{difficulty}: held-out greedy accuracy (each seed)")
        accuracy.set_xlabel("learner step")
        accuracy.legend(fontsize=8)
        degenerate.set_title(f"{difficulty}: all-correct groups (10-step mean)")
        degenerate.set_xlabel("learner step")
        degenerate.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(out / "objectives.png", dpi=110)
    plt.close(fig)


def _all_correct_by_step(run_dir: Path, window: int = 10) -> list[tuple[int, float]]:
    from echo2.telemetry.metrics import read_jsonl

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "degenerate_all_correct_fraction" in r]
    values = [r["degenerate_all_correct_fraction"] for r in steps]
    return [(r["version"], sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1]))
            for i, r in enumerate(steps)]


def _subset(names: str, known: dict) -> list[str]:
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise SystemExit(f"unknown or empty choice {unknown or names!r}; choose from {', '.join(known)}")
    return chosen


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/objectives", add_options)
    seeds = 1 if args.quick else args.seeds
    difficulties = ["default"] if args.quick else _subset(args.difficulties, DIFFICULTIES)
    objectives = ["grpo", "dapo+echoclip"] if args.quick else _subset(args.objectives, OBJECTIVES)
    runs = [run_one(args, d, o, seed) for d in difficulties for o in objectives for seed in range(seeds)]
    rows = aggregate(runs)
    columns = ["difficulty", "objective", "seeds", "steps", "acc_start", "acc_final", "acc_final_std", "acc_auc",
               "acc_auc_std", "final_vs_grpo_points", "final_vs_grpo_ci95", "all_correct_late",
               "echoclip_tokens_per_step"]
    print(f"\nwall-time budget per run: {'4 steps (quick)' if args.quick else f'{args.budget_s:g} s'}")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"quick": args.quick, "budget_s": args.budget_s, "seeds": seeds,
                                          "runs": runs})
    plot(runs, args.out)
    print(f"\nwrote {path} and {args.out / 'objectives.png'}")


if __name__ == "__main__":
    main()
