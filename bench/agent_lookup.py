"""Does an agent learn to use a tool whose answer it cannot guess? The lookup recipe through the gateway.

    python bench/agent_lookup.py [--quick] [--out DIR]

Two runs, one after the other, of ``configs/smollm2-135m-lookup-agent.yaml`` (SmolLM2-135M-Instruct,
two local workers, the agent on this host, its calls sampled by the workers through the gateway):

- ``tool``: the recipe as shipped (``echo2.recipes.lookup:play``): the model is asked for a number
  drawn per episode and offered ``lookup``; 30 steps (3 with ``--quick``);
- ``no_tool``: the same model asked the same question with no tool offered
  (``play_without_tool``): the baseline, which can only guess; a few steps, untrained in effect.

Read from each run's ``episodes.jsonl`` (every rewarded training episode: its version, reward,
``called``, ``solved`` and ``solved_turn``), over the episodes of the first ``WINDOW`` versions and
of the last ``WINDOW``: the share that called the tool, the share solved at the first turn and at
a later one, and the mean reward. ``*_rise_z``: the rise from the first window to the last in
standard errors (two-sample, a share's binomial error; the reward's from its sample spread).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config import load_config  # noqa: E402
from echo2.launch.train import run_training  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "smollm2-135m-lookup-agent.yaml"
MODEL = "smollm2-135m-instruct"
COLUMNS = ["arm", "window", "versions", "episodes", "called", "solved_turn_1", "solved_later", "reward"]
RISES = ["arm", "called_rise_z", "solved_later_rise_z", "reward_rise_z", "solved_turn_1_last"]


def run(arm: str, steps: int, out: Path) -> list[dict[str, Any]]:
    agent = "play" if arm == "tool" else "play_without_tool"
    config = load_config(str(CONFIG), [f"task.name=agent:echo2.recipes.lookup:{agent}", f"run.steps={steps}",
                                       f"run.dir={out / arm}", "eval.every=1000", "telemetry.progress=false"])
    summary = run_training(config)
    return [json.loads(line) for line in (summary.run_dir / "episodes.jsonl").read_text().splitlines()]


def window(arm: str, name: str, episodes: list[dict[str, Any]], versions: range) -> dict[str, Any]:
    chosen = [e for e in episodes if e["version"] in versions]
    n = len(chosen)
    rewards = [e["reward"] for e in chosen]
    mean = sum(rewards) / n
    return {"arm": arm, "window": name, "versions": f"{versions.start}-{versions.stop - 1}", "episodes": n,
            "called": sum(e["called"] for e in chosen) / n,
            "solved_turn_1": sum(e["solved_turn"] == 1 for e in chosen) / n,
            "solved_later": sum(e["solved_turn"] > 1 for e in chosen) / n, "reward": mean,
            "reward_var": sum((r - mean) ** 2 for r in rewards) / max(n - 1, 1)}


def share_z(first: dict[str, Any], last: dict[str, Any], key: str) -> float:
    p1, p2, n1, n2 = first[key], last[key], first["episodes"], last["episodes"]
    error = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return (p2 - p1) / error if error else 0.0


def rises(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    error = math.sqrt(first["reward_var"] / first["episodes"] + last["reward_var"] / last["episodes"])
    return {"arm": first["arm"], "called_rise_z": share_z(first, last, "called"),
            "solved_later_rise_z": share_z(first, last, "solved_later"),
            "reward_rise_z": (last["reward"] - first["reward"]) / error if error else 0.0,
            "solved_turn_1_last": last["solved_turn_1"]}


def plot(episodes: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.5))
    for arm, rows in episodes.items():
        by_version: dict[int, list[dict[str, Any]]] = {}
        for e in rows:
            by_version.setdefault(e["version"], []).append(e)
        versions = sorted(by_version)
        for key, style in (("called", "--"), ("solved", "-")):
            axis.plot(versions, [sum(e[key] for e in by_version[v]) / len(by_version[v]) for v in versions], style,
                      label=f"{arm}: {key}")
    axis.set_xlabel("version the episode's group opened at")
    axis.set_ylabel("share of episodes")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/agent-lookup")
    steps, baseline_steps, width = (3, 1, 1) if args.quick else (30, 2, 6)
    episodes = {"tool": run("tool", steps, args.out), "no_tool": run("no_tool", baseline_steps, args.out)}
    rows, summary = [], []
    for arm, arm_steps in (("tool", steps), ("no_tool", baseline_steps)):
        first = window(arm, "first", episodes[arm], range(0, width))
        last = window(arm, "last", episodes[arm], range(max(arm_steps - width, 0), arm_steps + 1))
        rows += [first, last] if arm == "tool" else [first]
        if arm == "tool":
            summary.append(rises(first, last))
    for row in rows:
        row.pop("reward_var")
    print(format_table(rows, COLUMNS))
    print()
    print(format_table(summary, RISES))
    plot(episodes, args.out / "agent-lookup.png")
    path = write_results(args.out, rows, {"steps": steps, "window_versions": width, "rises": summary,
                                          "quick": args.quick}, models=(MODEL,))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
