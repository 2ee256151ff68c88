"""What the agent gateway adds to a worker's sampling, per model call.

    python bench/gateway_cost.py [--quick] [--out DIR]

An agent run (``echo2 train task.name=agent:...``) on SmolLM2-135M-Instruct with one local worker
and one episode played at a time, so that every lease carries exactly one call: the agent
(:func:`probe`, the ``openai`` SDK) makes ``TURNS`` calls an episode, each extending the last with
a tool result, and times each call as it sees it. Per call, side by side in the same run:

- ``generate_s``: the worker's own sampling of it (its lease's ``generate`` interval in the run's
  timeline);
- ``call_s``: the call as the agent saw it (HTTP to the gateway, rendering, the lease round trip,
  the worker's sampling and submission, the answer);
- ``added_s`` = ``call_s`` − ``generate_s``: what the gateway path adds, and ``added_vs_generate``
  its ratio to the sampling; ``added_p50_s`` and ``added_p90_s``: the median and 90th percentile of
  each call's own difference (a call queued while the worker loads a new version, in this
  synchronous run, waits for that too: the mean carries those);
- ``gateway_cpu_s``: the gateway's own work per call on the coordinator (chat template, encoding,
  the token-exact join, the answer's parsing), from its counters, and ``cpu_vs_generate``.

One row per reply budget (``max_tokens``): the added time is mostly fixed, so it weighs less on
longer replies. The agent is this script's own :func:`probe` (``agent:__main__:probe``: the module
running, so that the latencies it records are the ones read here).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.agents import AgentRun  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402
from echo2.telemetry.metrics import read_jsonl  # noqa: E402

MODEL = "smollm2-135m-instruct"
TURNS = 3
COLUMNS = ["max_tokens", "calls", "generate_s", "call_s", "added_s", "added_vs_generate", "added_p50_s", "added_p90_s",
           "gateway_cpu_s", "cpu_vs_generate"]

#: Each call's latency as the agent saw it (seconds), filled by :func:`probe`.
LATENCIES: list[float] = []
BUDGET = {"max_tokens": 32}
#: Every episode's calls, one at a time (the pool plays them all on one event loop).
ONE_AT_A_TIME = asyncio.Lock()


async def probe(example, client) -> float:
    """``TURNS`` calls, each extending the last with a tool result, each timed."""
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"What is {example.prompt}"}]
    for _ in range(TURNS):
        async with ONE_AT_A_TIME:  # held-out episodes play beside training ones: one call in flight, one per lease
            started = time.perf_counter()
            answer = await client.chat.completions.create(model="policy", messages=messages, **BUDGET)
            LATENCIES.append(time.perf_counter() - started)
        messages += [answer.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": "t", "content": "42"}]
    return 0.0


def measure(max_tokens: int, steps: int, out: Path) -> dict[str, Any]:
    LATENCIES.clear()
    BUDGET["max_tokens"] = max_tokens
    runs: list[AgentRun] = []
    attach = AgentRun.attach

    def attaching(self, *args):
        runs.append(self)
        return attach(self, *args)

    AgentRun.attach = attaching
    try:
        config = load_config(None, [
            f"model.name={MODEL}", "model.dtype=bfloat16", "broadcast.dtype=bfloat16",
            "verification.logprob_tolerance=0.3", "task.name=agent:__main__:probe", "agent.examples=arithmetic",
            "agent.concurrency=1", "workers.count=1", "rollout.group_size=2", "learner.groups_per_step=1",
            f"run.steps={steps}", f"rollout.max_new_tokens={max_tokens}", "rollout.temperature=0.7", "eval.size=1",
            "eval.every=1000", "protocol=sync", f"run.dir={out / f'run-{max_tokens}'}", "telemetry.progress=false"])
        summary = run_training(config)
    finally:
        AgentRun.attach = attach
    desk = runs[0].desk
    leases = sorted((e for e in read_jsonl(summary.run_dir / "timeline.jsonl") if e.get("kind") == "generate"),
                    key=lambda e: e["start"])
    calls = int(desk.seconds["calls"])
    if len(leases) != calls or not 0 < len(LATENCIES) <= calls:
        raise RuntimeError(f"expected one lease per call: {calls} calls, {len(leases)} leases, "
                           f"{len(LATENCIES)} timed by the agent")
    # the run's end cancels the episode in play: a last call may be answered after its agent stopped timing
    generate = [e["end"] - e["start"] for e in leases[: len(LATENCIES)]]
    added = [call - sampling for call, sampling in zip(LATENCIES, generate)]  # calls are one at a time: lease i is call i
    generate_s, call_s = statistics.mean(generate), statistics.mean(LATENCIES)
    cpu_s = desk.seconds["render_s"] / calls
    return {"max_tokens": max_tokens, "calls": len(LATENCIES), "generate_s": generate_s, "call_s": call_s,
            "added_s": call_s - generate_s, "added_vs_generate": (call_s - generate_s) / generate_s,
            "added_p50_s": statistics.median(added), "added_p90_s": statistics.quantiles(added, n=10)[-1],
            "gateway_cpu_s": cpu_s, "cpu_vs_generate": cpu_s / generate_s}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"max_tokens={r['max_tokens']}" for r in rows]
    figure, axis = plt.subplots(figsize=(5, 3.2))
    axis.bar(labels, [r["generate_s"] for r in rows], label="worker's sampling")
    axis.bar(labels, [r["added_s"] for r in rows], bottom=[r["generate_s"] for r in rows], label="added by the gateway path")
    axis.set_ylabel("seconds per call (mean)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/gateway-cost")
    steps = 2 if args.quick else 6
    rows = [measure(max_tokens, steps, args.out) for max_tokens in (8, 32)]
    print(format_table(rows, COLUMNS))
    plot(rows, args.out / "gateway-cost.png")
    path = write_results(args.out, rows, {"turns_per_episode": TURNS, "steps": steps, "quick": args.quick},
                         models=(MODEL,))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
