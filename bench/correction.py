"""Does the staleness correction keep S = 8 stable? No correction vs truncated vs decoupled at S = 8, against S = 1.

    python bench/correction.py [--quick] [--out DIR] [--seeds N] [--lr LR] [--steps N]

Every run is a real ``echo2 train`` (learner + coordinator in this process, two worker
processes) on the shipped model and default task. Generation outruns the learner here, so at
S = 8 the learner trains on groups that are 8 versions old from the tenth step on. The learning
rate is raised to 1e-4 (5x the default) so that eight versions are far enough apart for the
correction to matter; at the default rate the policies 8 steps apart barely differ.

Rows (mean over seeds): held-out greedy accuracy at the end (mean of the last 3 evals) and its
worst eval, mean staleness of the trained groups, the behaviour weight pi_prox / pi_behav (or
pi_theta / pi_behav) — its mean over steps and the mean of each step's maximum — the share of
tokens whose weight exceeds the cap, and PPO's clipped fraction.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import eval_curve, format_table, mean_std, parse_args, step_means, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

SETTINGS = [(1, "truncated"), (8, "none"), (8, "truncated"), (8, "decoupled")]
RATIO_KEYS = ["staleness_mean", "behaviour_weight_mean", "behaviour_weight_max",
              "behaviour_weight_truncated_fraction", "clip_fraction"]


def add_options(parser) -> None:
    parser.add_argument("--seeds", type=int, default=2, help="seeds per setting")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate of every run")
    parser.add_argument("--steps", type=int, default=80, help="learner steps per run")


def run_one(args, staleness: int, correction: str, seed: int) -> dict:
    name = f"S{staleness}-{correction}-seed{seed}"
    print(f"== {name}", flush=True)
    steps, every, size = (4, 2, 50) if args.quick else (args.steps, 10, 300)
    config = load_config(overrides=[
        f"staleness={staleness}", f"learner.correction={correction}", f"learner.lr={args.lr}",
        f"run.steps={steps}", f"eval.every={every}", f"eval.size={size}", f"run.seed={seed}", "eval.show=0",
        f"run.dir={args.out / 'runs'}", f"run.name={name}", "telemetry.progress=false",
        "telemetry.tensorboard=false", "checkpoint.every=0",
    ])
    summary = run_training(config)
    curve = eval_curve(summary.run_dir)
    return {"S": staleness, "correction": correction, "seed": seed, "acc_start": summary.accuracy_before,
            "acc_final": summary.accuracy_after, "acc_worst": min(p["accuracy"] for p in curve),
            **step_means(summary.run_dir, RATIO_KEYS), "curve": curve, "run_dir": str(summary.run_dir)}


def aggregate(runs: list[dict]) -> list[dict]:
    rows = []
    for staleness, correction in dict.fromkeys((r["S"], r["correction"]) for r in runs):
        seeds = [r for r in runs if r["S"] == staleness and r["correction"] == correction]
        final, final_std = mean_std([r["acc_final"] for r in seeds])
        row = {"S": staleness, "correction": correction, "seeds": len(seeds),
               "acc_start": mean_std([r["acc_start"] for r in seeds])[0], "acc_final": final,
               "acc_final_std": final_std, "acc_worst": mean_std([r["acc_worst"] for r in seeds])[0]}
        row.update({key: mean_std([r[key] for r in seeds if r[key] is not None] or [0.0])[0] for key in RATIO_KEYS})
        rows.append(row)
    return rows


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (accuracy, weights) = plt.subplots(1, 2, figsize=(13, 4.5))
    settings = list(dict.fromkeys((r["S"], r["correction"]) for r in runs))
    for k, (staleness, correction) in enumerate(settings):
        for i, run in enumerate(r for r in runs if (r["S"], r["correction"]) == (staleness, correction)):
            label = f"S={staleness} {correction}" if i == 0 else None
            accuracy.plot([p["step"] for p in run["curve"]], [p["accuracy"] for p in run["curve"]],
                          color=f"C{k}", alpha=0.8, label=label)
            steps = [r for r in read_jsonl(Path(run["run_dir"]) / "metrics.jsonl") if "behaviour_weight_max" in r]
            weights.plot([r["version"] for r in steps], [r["behaviour_weight_max"] for r in steps],
                         color=f"C{k}", alpha=0.6, label=label)
    accuracy.set_title("held-out greedy accuracy (each seed)")
    accuracy.set_xlabel("learner step")
    accuracy.legend(fontsize=8)
    weights.set_yscale("log")
    weights.set_title("largest behaviour weight of each step")
    weights.set_xlabel("learner step")
    weights.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "correction.png", dpi=110)
    plt.close(fig)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/correction", add_options)
    seeds = 1 if args.quick else args.seeds
    settings = [SETTINGS[0], SETTINGS[3]] if args.quick else SETTINGS
    runs = [run_one(args, staleness, correction, seed) for staleness, correction in settings for seed in range(seeds)]
    rows = aggregate(runs)
    columns = ["S", "correction", "seeds", "acc_start", "acc_final", "acc_final_std", "acc_worst", *RATIO_KEYS]
    print(f"\nlearning rate {args.lr:g}, {4 if args.quick else args.steps} steps per run")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {"quick": args.quick, "lr": args.lr, "seeds": seeds, "runs": runs})
    plot(runs, args.out)
    print(f"\nwrote {path} and {args.out / 'correction.png'}")


if __name__ == "__main__":
    main()
