"""Verifiable draws: how far honest workers' tokens fall from their draws' intervals, how far chosen ones do, what the check costs.

    python bench/draws.py [--quick] [--out DIR]

For each model and worker dtype (the shipped tiny model in float32; SmolLM2-135M-Instruct in
bfloat16, the recipe's ``model.dtype``, and float32; ``--quick``: the tiny model only), a worker
samples a lease's rows as the ``hf`` engine does (:func:`echo2.model.sampling.sample`, the lease's
draws), and the learner's audit recomputes them as :class:`echo2.learner.verification.Verifier`
does (a scratch copy in the same dtype, the completions scored whole on their prompt's cache,
:func:`echo2.learner.logprobs.completion_scores`). Columns:

* ``honest_gap_max`` / ``honest_gap_p999``: how far an honest token's draw lies outside its
  interval under the auditor's arithmetic (0: inside); ``over_tolerance``: how many exceed
  ``verification.draw_tolerance`` as a run sets it for that dtype (a false quarantine each);
* ``chosen_completions`` and ``chosen_caught``: when the same worker returns what it sampled from
  its own randomness instead (true log-probs), how many of its completions differ from the draws'
  (a peaked distribution leaves nothing to choose), and the share of those with a token over the
  tolerance: caught; ``chosen_tokens_out``: the share of all its tokens over it;
* ``check_s_per_token`` and ``check_cost``: the audit's time per audited token with the draw check
  against without it, side by side in one run (each the median of 3).
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from common import format_table, parse_args, write_results  # noqa: E402

from echo2.core.draw_rule import row_key, uniform  # noqa: E402
from echo2.learner.logprobs import completion_scores  # noqa: E402
from echo2.model.draws import Draws, draw_gaps, draw_tolerance  # noqa: E402
from echo2.model.loading import DTYPES, load_model, load_tokenizer, pin_threads  # noqa: E402
from echo2.model.sampling import sample  # noqa: E402
from echo2.model.sources import SHIPPED_MODEL  # noqa: E402
from echo2.tasks import load_task  # noqa: E402

SMOLLM2 = "smollm2-135m-instruct"


def arm(model_name: str, dtype: str, rows: int, new_tokens: int, seed: int = 7) -> tuple[dict, list[float], list[float]]:
    tokenizer = load_tokenizer(model_name)
    worker = load_model(model_name, dtype).eval()
    auditor = copy.deepcopy(worker)  # the verifier's scratch copy: parameters in model.dtype, no autocast
    for parameter in auditor.parameters():
        parameter.data = parameter.data.to(DTYPES[dtype])
    examples = load_task("arithmetic").train_examples(seed)
    prompts = [tokenizer(next(examples).prompt)["input_ids"] for _ in range(rows // 4) for _ in range(4)]
    prompts = [prompts[4 * (i // 4)] for i in range(rows)]  # groups of 4 rows sharing a prompt
    keys = [(seed, row_key(i // 4, i % 4)) for i in range(rows)]
    common = dict(max_new_tokens=new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    with torch.no_grad():
        honest = sample(worker, prompts, draws=Draws(keys), **common)
        chosen = sample(worker, prompts, draws=Draws([(seed ^ 0x5EED, row) for _, row in keys]), **common)

    def gaps(completions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token's gap, and each completion's largest."""
        with torch.no_grad():
            scores = completion_scores(auditor, prompts, completions, pad_id=tokenizer.pad_token_id, intervals=True)
        u = torch.tensor([[uniform(*keys[i], p) if p < len(c) else float("nan") for p in range(scores.mask.shape[1])]
                          for i, c in enumerate(completions)], dtype=torch.float64)
        off = torch.where(scores.mask > 0, draw_gaps(*scores.intervals, u), 0.0)
        return off[scores.mask > 0], off.amax(dim=1)

    def audit_seconds(intervals: bool) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            with torch.no_grad():
                completion_scores(auditor, prompts, honest.completion_ids, pad_id=tokenizer.pad_token_id,
                                  intervals=intervals)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    tolerance = draw_tolerance(None, dtype)
    (honest_gaps, _), (chosen_gaps, chosen_rows) = gaps(honest.completion_ids), gaps(chosen.completion_ids)
    differ = torch.tensor([a != b for a, b in zip(honest.completion_ids, chosen.completion_ids)])
    tokens = int(honest_gaps.numel())
    plain, checked = audit_seconds(False), audit_seconds(True)
    row = {"model": model_name, "dtype": dtype, "rows": rows, "tokens": tokens, "tolerance": tolerance,
           "honest_gap_max": float(honest_gaps.max()),
           "honest_gap_p999": float(torch.quantile(honest_gaps, 0.999)),
           "over_tolerance": int((honest_gaps > tolerance).sum()),
           "chosen_tokens_out": float((chosen_gaps > tolerance).double().mean()),
           "chosen_completions": int(differ.sum()),
           "chosen_caught": float((chosen_rows[differ] > tolerance).double().mean()) if differ.any() else None,
           "check_s_per_token": (checked - plain) / tokens, "check_cost": checked / plain}
    return row, honest_gaps.tolist(), chosen_gaps.tolist()


def plot(arms: list[tuple[dict, list[float], list[float]]], out: Path) -> Path:
    """Per arm, the distribution of draw gaps (how far outside its interval each token's draw lies),
    honest against chosen, on a log scale, with the tolerance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(arms), figsize=(5.5 * len(arms), 4), squeeze=False)
    bins = [0.0, *[10.0**e for e in range(-12, 1)]]
    for axis, (row, honest, chosen) in zip(axes[0], arms):
        axis.hist([[max(g, 1e-12) for g in honest], [max(g, 1e-12) for g in chosen]], bins=bins[1:],
                  label=["honest (lease's draws)", "chosen (own randomness)"], color=["tab:green", "tab:red"])
        axis.axvline(row["tolerance"], color="black", linestyle="--", label=f"tolerance {row['tolerance']}")
        axis.set_xscale("log")
        axis.set_title(f"{row['model']} {row['dtype']}: {row['tokens']} tokens", fontsize=9)
        axis.set_xlabel("draw gap (0 inside the interval: shown at 1e-12)")
        axis.legend(fontsize=7)
    fig.tight_layout()
    path = out / "draws.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/draws")
    pin_threads(1)
    started = time.time()
    plan = [(SHIPPED_MODEL, "float32", 64, 24)]
    if not args.quick:
        plan += [(SMOLLM2, "bfloat16", 32, 48), (SMOLLM2, "float32", 32, 48)]
    arms = [arm(*entry) for entry in plan]
    rows = [row for row, _, _ in arms]
    print("\nverification.draw_tolerance by the workers' dtype (echo2.model.draws.DRAW_TOLERANCE); one thread")
    print(format_table(rows, ["model", "dtype", "tolerance", "tokens", "honest_gap_max", "honest_gap_p999", "over_tolerance",
                              "chosen_completions", "chosen_caught", "chosen_tokens_out", "check_s_per_token",
                              "check_cost"]))
    path = write_results(args.out, rows, {"quick": args.quick, "wall_s": time.time() - started},
                         models=sorted({entry[0] for entry in plan}))
    figure = plot(arms, args.out)
    print(f"\nwrote {path} and {figure} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
