"""Does a worker that refills its batch as rows end decode more per second than one that drains
each lease first? The engine, side by side in one run.

    python bench/streaming.py [--quick] [--out DIR]

The task: SmolLM2-135M-Instruct on reasoning-gym's chain sums asked to explain its steps in up to
96 tokens (``bench/length_lab.py``'s task: replies from a few tokens to the cap), 8 prompts x G=8 =
64 rows, temperature 1, one thread, in each of ``--dtypes`` (default float32; bf16 runs at a quarter
of its speed on a CPU without bf16 instructions). The same
rows decoded by :class:`echo2.model.continuous.ContinuousBatch` three ways, each row drawing from
its own key (so the arms sample the same tokens but where a batch's other rows change the float
rounding of a near-tie: ``same_tokens``):

1. **static**: a lease of 32 rows as one batch, each row run until the longest ends (finished rows
   still decoded: the sampler as it was before rows were retired), then the next lease;
2. **lease barrier**: the same leases, each row retired when it ends (no forward for it), the next
   lease still waiting for the longest row: a worker that submits a lease as a whole;
3. **streaming**: up to 32 rows in flight, each freed slot refilled at once from the rows left: a
   worker that takes its next rows while others still decode.

Per arm: seconds, tokens/s, mean rows per decoding step, and the speedup over ``static``. The arms
run one after the other, twice, alternating, and the faster of each arm's two runs is kept (the
figure is the engine's, not the noise of the machine). ``--quick``: the shipped tiny model, 8 prompts,
replies up to 24 tokens.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.model.continuous import ContinuousBatch, Row  # noqa: E402
from echo2.model.loading import load_model, load_tokenizer, pin_threads  # noqa: E402
from echo2.tasks import load_task  # noqa: E402

MODEL = "smollm2-135m-instruct"
TASK_OPTIONS = {"dataset": "chain_sum", "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2,
                "chat_template": MODEL, "system_prompt": "You are a helpful math tutor.",
                "instruction": "Explain your steps briefly, then give the answer.", "answer_format": "last_number"}
GROUP_SIZE, IN_FLIGHT, SEED = 8, 32, 11


def rows_of(prompts: list[list[int]], max_new_tokens: int) -> list[Row]:
    return [Row(key=(p, i), prompt_ids=prompt, draw_key=(SEED, p * GROUP_SIZE + i), max_new_tokens=max_new_tokens)
            for p, prompt in enumerate(prompts) for i in range(GROUP_SIZE)]


def leases(rows: list[Row]) -> list[list[Row]]:
    return [rows[start:start + IN_FLIGHT] for start in range(0, len(rows), IN_FLIGHT)]


def decode(model, batch_rows: list[Row], eos_id: int, sizes: list[int]) -> list[Row]:
    """``batch_rows`` admitted at once and stepped until the last ends; each step's size in ``sizes``."""
    batch = ContinuousBatch(model, temperature=1.0, eos_id=eos_id, pad_id=0)
    batch.admit(batch_rows)
    done = []
    while len(batch):
        sizes.append(len(batch))
        done += batch.step(0)
    return done


def run_static(model, rows: list[Row], longest: list[int]) -> tuple[list[Row], list[int]]:
    """Each lease decoded for as many steps as its longest row, every row to the end (no row ends
    early: the end-of-sequence id is one no token has), the cost of a batch that keeps finished rows."""
    done, sizes = [], []
    for lease, steps in zip(leases(rows), longest, strict=True):
        done += decode(model, [Row(key=r.key, prompt_ids=r.prompt_ids, draw_key=r.draw_key, max_new_tokens=steps)
                               for r in lease], -1, sizes)
    return done, sizes


def run_barrier(model, rows: list[Row], eos_id: int) -> tuple[list[Row], list[int]]:
    done, sizes = [], []
    for lease in leases(rows):
        done += decode(model, lease, eos_id, sizes)
    return done, sizes


def run_streaming(model, rows: list[Row], eos_id: int) -> tuple[list[Row], list[int]]:
    batch = ContinuousBatch(model, temperature=1.0, eos_id=eos_id, pad_id=0)
    waiting, done, sizes = list(rows), [], []
    while waiting or len(batch):
        batch.admit([waiting.pop(0) for _ in range(min(IN_FLIGHT - len(batch), len(waiting)))])
        sizes.append(len(batch))
        done += batch.step(0)
    return done, sizes


def timed(arm: Callable[[], tuple[list[Row], list[int]]]) -> tuple[float, list[Row], list[int]]:
    started = time.perf_counter()
    done, sizes = arm()
    return time.perf_counter() - started, done, sizes


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--dtypes", default="float32", help="comma-separated model dtypes (default float32)")

    args = parse_args(__doc__.splitlines()[0], "bench/out/streaming", options)
    pin_threads(1)
    model_name = "echo2/tiny-arith" if args.quick else MODEL
    tokenizer = load_tokenizer(model_name)
    if args.quick:
        prompts = [tokenizer(f"{a}+{b}=")["input_ids"] for a, b in zip(range(8), range(3, 11))]
        max_new, dtypes = 24, ["float32"]
    else:
        task = load_task("reasoning_gym", TASK_OPTIONS)
        prompts = [tokenizer(example.prompt)["input_ids"] for example in task.eval_examples(8)]
        max_new, dtypes = 96, args.dtypes.split(",")
    table = []
    for dtype in dtypes:
        model = load_model(model_name, dtype)
        eos = tokenizer.eos_token_id
        lengths = {r.key: len(r.token_ids) for r in run_barrier(model, rows_of(prompts, max_new), eos)[0]}
        longest = [max(lengths[r.key] for r in lease) for lease in leases(rows_of(prompts, max_new))]
        arms = {"static": lambda: run_static(model, rows_of(prompts, max_new), longest),
                "lease barrier": lambda: run_barrier(model, rows_of(prompts, max_new), eos),
                "streaming": lambda: run_streaming(model, rows_of(prompts, max_new), eos)}
        best: dict[str, tuple[float, list[Row], list[int]]] = {}
        for order in (list(arms), list(arms)[::-1]):
            for name in order:
                result = timed(arms[name])
                if name not in best or result[0] < best[name][0]:
                    best[name] = result
        tokens = {name: {r.key: r.token_ids for r in done} for name, (_, done, _) in best.items()}
        same = tokens["lease barrier"] == tokens["streaming"]
        for name, (seconds, done, sizes) in best.items():
            # the tokens kept (a static batch's past a row's end are dropped: its lengths are the barrier's)
            count = sum(lengths.values()) if name == "static" else sum(len(r.token_ids) for r in done)
            table.append({"dtype": dtype, "arm": name, "rows": len(done), "tokens": count, "seconds": seconds,
                          "tokens_per_s": count / seconds, "mean_rows_per_step": sum(sizes) / len(sizes),
                          "speedup": best["static"][0] / seconds, "same_tokens": same})
    columns = ["dtype", "arm", "rows", "tokens", "seconds", "tokens_per_s", "mean_rows_per_step", "speedup",
               "same_tokens"]
    print(format_table(table, columns))
    print(f"\nwrote {write_results(args.out, table, {'in_flight': IN_FLIGHT}, models=[model_name])}")


if __name__ == "__main__":
    main()
