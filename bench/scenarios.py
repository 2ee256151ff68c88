"""What does a distributed run cost against the centralized baseline? The shipped scenarios, simulated.

    python bench/scenarios.py [--quick] [--out DIR]

1. Every ``configs/scenarios/*.yaml``: workers active on average and parked workers activated
   again (``reactivations``), learner utilization, seconds per step, staleness,
   dissemination latency, rollouts wasted, dollars for the whole run and for the centralized
   co-located baseline (the learner's GPUs generating, then training) at equal learner steps,
   and how long the simulation itself took.
2. A sweep on one scenario (``qwen3-4b-64w-datacenter``): utilization and cost against the
   staleness bound S (S = 0 is ``sync``) and against the number of workers that can be had.
3. Bandwidth regimes for ``qwen3-8b-256w-wan``: the workers' median uplink, with full bf16 weights
   or a LoRA adapter on the wire.
4. Sensitivity of the cost ratio of the swept scenario to single inputs (one changed at a time).
5. Activation's switch margin: each shipped scenario again without it (``switch_margin`` 0).
6. Activation's headroom: the two datacenter scenarios the rule scales down, again at larger
   headrooms (how far above the fluid model's requirement the learner stays busy).

Every input is in the scenario files (with its source); nothing here is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.simulation.engine import simulate  # noqa: E402
from echo2.simulation.results import SimResult  # noqa: E402
from echo2.simulation.scenario import load_scenario  # noqa: E402

SCENARIOS = Path(__file__).resolve().parent.parent / "configs" / "scenarios"
SWEPT = SCENARIOS / "qwen3-4b-64w-datacenter.yaml"
WAN = SCENARIOS / "qwen3-8b-256w-wan.yaml"
MOE = SCENARIOS / "qwen3-30b-a3b-32w-datacenter.yaml"
HEADROOMS = (1.3, 1.5)
LORA_GB = 0.35  # the adapter of qwen3-8b-1000w-lora-consumer.yaml
#: (what changes, nested changes to the swept scenario) for the sensitivity table.
SENSITIVITY = [
    ("as shipped", {}),
    ("worker tokens/s x 0.5", {"fleet": {"0": {"tokens_per_s": 1390}}}),
    ("worker tokens/s x 1.5", {"fleet": {"0": {"tokens_per_s": 4170}}}),
    ("learner generation tokens/s x 0.5", {"learner": {"generation_tokens_per_s_per_gpu": 7000}}),
    ("learner $2.49/GPU-h (low end of [P2])", {"learner": {"price_per_gpu_hour": 2.49}}),
    ("learner $3.99/GPU-h (high end of [P2])", {"learner": {"price_per_gpu_hour": 3.99}}),
    ("responses 4096 tokens", {"workload": {"response_tokens": 4096}}),
    ("preemptions x 5", {"fleet": {"0": {"preemption_per_hour": 0.5}}}),
    ("worker uplinks 500 Mbit/s", {"fleet": {"0": {"upload_mbps": 500}}}),
]


def row(result: SimResult, **labels) -> dict:
    summary = result.summary()
    baseline = result.centralized
    hours = sum(result.worker_hours.values())
    return {
        **labels, "workers": sum(c.count for c in result.scenario.fleet),
        "mean_active": hours * 3600 / result.wall_s, "reactivations": result.reliability["workers_reactivated"],
        "switch_margin": result.scenario.activation.switch_margin, "headroom": result.scenario.activation.headroom,
        "S": result.scenario.recipe.staleness,
        "util": result.utilization, "s_per_step": summary["seconds_per_step"],
        "staleness": summary["staleness_mean"], "dissemination_s": summary["dissemination_mean_s"],
        "wasted_pct": 100 * sum(result.wasted.values()) / max(result.rollouts_generated, 1),
        "cost_usd": result.cost_usd, "workers_usd": sum(result.cost_by_class.values()),
        "centralized_usd": baseline.cost_usd, "ratio": result.cost_usd / baseline.cost_usd,
        "centralized_util": baseline.utilization, "runtime_s": result.runtime_s, "events": result.events,
    }


def run(path: Path, steps: int | None, changes: dict | None = None) -> SimResult:
    """Simulate ``path`` with nested ``changes`` (and ``steps`` learner steps when given)."""
    changes = dict(changes or {})
    if steps:
        changes["recipe"] = {**changes.get("recipe", {}), "run": {"steps": steps}}
    return simulate(load_scenario(path, changes), timeline_workers=0)


def sweeps(steps: int | None, quick: bool) -> dict[str, list[dict]]:
    staleness = [0, 2, 4] if quick else [0, 1, 2, 3, 4, 6, 8]
    counts = [16, 64] if quick else [8, 16, 24, 32, 48, 64, 96]
    by_s = [row(run(SWEPT, steps, {"recipe": {"staleness": s, "protocol": "sync" if s == 0 else "async"}}), S_=s)
            for s in staleness]
    by_count = [row(run(SWEPT, steps, {"fleet": {"0": {"count": n}}}), count=n) for n in counts]
    uplinks = [300, 3000] if quick else [100, 300, 1000, 3000]
    by_bandwidth = [row(run(WAN, steps, {"fleet": {"0": {"upload_mbps": up}, "1": {"upload_mbps": up}},
                                         **({"model": {"payload_gb": LORA_GB}} if lora else {})}),
                        uplink_mbps=up, payload="LoRA adapter" if lora else "bf16 weights")
                    for lora in (False, True) for up in uplinks]
    sensitivity = [row(run(SWEPT, steps, changes), change=label)
                   for label, changes in (SENSITIVITY[:2] if quick else SENSITIVITY)]
    return {"staleness": by_s, "fleet_size": by_count, "bandwidth": by_bandwidth, "sensitivity": sensitivity}


def switch_margins(paths: list[Path], shipped: list[dict], steps: int | None) -> list[dict]:
    """Each scenario's row as shipped beside the same run without ``activation.switch_margin``:
    how weighing the active workers cheaper changes switching and who is active (the simulator
    bills no switch, so the cost column shows only the latter)."""
    return varied(paths, shipped, steps, [{"activation": {"switch_margin": 0.0}}])


def headrooms(paths: list[Path], shipped: list[dict], steps: int | None) -> list[dict]:
    """Each scenario's row as shipped beside the same run at each of :data:`HEADROOMS`: the fluid
    model leaves out the time between a worker's leases and the lease granularity, so the
    throughput it asks for keeps the learner a little short of busy."""
    return varied(paths, shipped, steps, [{"activation": {"headroom": h}} for h in HEADROOMS])


def varied(paths: list[Path], shipped: list[dict], steps: int | None, changes: list[dict]) -> list[dict]:
    """Each scenario's shipped row, then a run of it with each of ``changes``."""
    by_name = {r["scenario"]: r for r in shipped}
    return [r for path in paths
            for r in [by_name[path.stem], *(row(run(path, steps, change), scenario=path.stem) for change in changes)]]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], "bench/out/scenarios")
    steps = 60 if args.quick else None
    paths = sorted(SCENARIOS.glob("*.yaml"))
    rows = [row(run(path, steps), scenario=path.stem) for path in paths]
    columns = ["scenario", "workers", "mean_active", "reactivations", "S", "util", "s_per_step", "staleness",
               "dissemination_s", "wasted_pct", "cost_usd", "centralized_usd", "ratio", "centralized_util", "runtime_s"]
    print(format_table(rows, columns))
    swept = sweeps(steps, args.quick)
    swept["switch_margin"] = switch_margins(paths[:1] if args.quick else paths, rows, steps)
    swept["headroom"] = headrooms([SWEPT] if args.quick else [SWEPT, MOE], rows, steps)
    for name, key in (("staleness bound", "S_"), ("workers available", "count")):
        print(f"\n{SWEPT.stem}, by {name}:")
        print(format_table(swept["staleness" if key == "S_" else "fleet_size"],
                           [key, "mean_active", "reactivations", "util", "s_per_step", "dissemination_s", "cost_usd",
                            "centralized_usd", "ratio"]))
    print(f"\n{WAN.stem}, by bandwidth regime:")
    print(format_table(swept["bandwidth"], ["payload", "uplink_mbps", "mean_active", "util", "s_per_step",
                                            "dissemination_s", "cost_usd", "ratio"]))
    print("\nactivation's switch margin, each shipped scenario as shipped and without one:")
    print(format_table(swept["switch_margin"], ["scenario", "switch_margin", "reactivations", "mean_active", "util",
                                                "cost_usd", "ratio"]))
    print("\nactivation's headroom, as shipped and larger:")
    print(format_table(swept["headroom"], ["scenario", "headroom", "reactivations", "mean_active", "util",
                                           "s_per_step", "cost_usd", "ratio"]))
    print(f"\n{SWEPT.stem}, one input changed at a time:")
    print(format_table(swept["sensitivity"], ["change", "mean_active", "util", "s_per_step", "cost_usd",
                                              "centralized_usd", "ratio"]))
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps or "as in each scenario", **swept},
                         models=())  # simulated
    plot(swept, args.out)
    print(f"\nwrote {path} and {args.out / 'scenarios.png'}")


def plot(swept: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for column, (key, label, x_label) in enumerate((("staleness", "S_", "staleness bound S (0 = sync)"),
                                                    ("fleet_size", "count", "RTX 4090 workers available"))):
        rows = swept[key]
        xs = [r[label] for r in rows]
        utilization, cost = axes[0][column], axes[1][column]
        utilization.plot(xs, [r["util"] for r in rows], "o-", color="tab:blue", label="distributed (echo2)")
        utilization.plot(xs, [r["centralized_util"] for r in rows], "--", color="tab:red",
                         label="centralized: share of time training")
        utilization.set_ylabel("learner utilization")
        utilization.set_ylim(0, 1.05)
        cost.plot(xs, [r["cost_usd"] for r in rows], "o-", color="black", label="distributed: learner + workers")
        cost.plot(xs, [r["workers_usd"] for r in rows], ":", color="tab:green", label="of which workers")
        cost.plot(xs, [r["centralized_usd"] for r in rows], "--", color="tab:red", label="centralized baseline")
        cost.set_ylabel("dollars for the run")
        cost.set_ylim(bottom=0)
        for ax in (utilization, cost):
            ax.set_xlabel(x_label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"{SWEPT.stem}: utilization and cost (equal learner steps)")
    fig.tight_layout()
    fig.savefig(out / "scenarios.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
