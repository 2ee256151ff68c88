"""What does a distributed run cost against the centralized baseline? The shipped scenarios, simulated.

    python bench/scenarios.py [--quick] [--out DIR]

1. Every ``configs/scenarios/*.yaml``, and the broadcasts a user would pick on the WAN (delta versions,
   a LoRA adapter) and the actors ECHO-2's setting could have: workers active on average and parked
   workers activated again (``reactivations``), learner utilization, seconds per step, staleness,
   dissemination latency, rollouts wasted, dollars for the whole run and for the centralized
   co-located baseline (the learner's GPUs generating, then training) at equal learner steps, the
   sources the scenario file cites, and how long the simulation itself took; each next to the
   planner before response lengths were a distribution (``ratio_before``: the same file with every
   response at the mean and every engine at its full rate to the last token).
2. The map of where distributing pays (:mod:`echo2.planning.payoff`): the dollars ratio over the
   workers' price per trained token relative to the co-located learner's and the baseline's
   share of a step spent generating, the analytic surface at full utilization, a grid of
   simulated runs of ``qwen3-4b-64w-datacenter`` (worker prices and the learner's generation speed
   scaled) and every row of 1 marked on it (``scenarios-map.png``).
3. A sweep on one scenario (``qwen3-4b-64w-datacenter``): utilization and cost against the
   staleness bound S (S = 0 is ``sync``) and against the number of workers that can be had.
4. Bandwidth regimes for ``qwen3-8b-256w-wan``: the workers' median uplink, with full bf16 weights
   or a LoRA adapter on the wire.
5. Sensitivity of the cost ratio of the swept scenario to single inputs (one changed at a time).
6. Activation's switch margin: each shipped scenario again without it (``switch_margin`` 0).
7. Activation's headroom: the two datacenter scenarios the rule scales down, again at larger
   headrooms (how far above the fluid model's requirement the learner stays busy).

Every input is in the scenario files (with its source); nothing here is measured.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import format_table, parse_args, write_results  # noqa: E402

from echo2.config.base import merge, read_yaml  # noqa: E402
from echo2.simulation.engine import simulate  # noqa: E402
from echo2.simulation.results import SimResult  # noqa: E402
from echo2.simulation.scenario import parse_scenario  # noqa: E402

SCENARIOS = Path(__file__).resolve().parent.parent / "configs" / "scenarios"
SWEPT = SCENARIOS / "qwen3-4b-64w-datacenter.yaml"
WAN = SCENARIOS / "qwen3-8b-256w-wan.yaml"
MOE = SCENARIOS / "qwen3-30b-a3b-32w-datacenter.yaml"
ECHO2 = SCENARIOS / "qwen3-8b-echo2-setting.yaml"
HEADROOMS = (1.3, 1.5)
LORA_GB = 0.35  # the adapter of qwen3-8b-1000w-lora-consumer.yaml
DELTA_GB = 0.57  # a bf16 delta version of Qwen3-8B, 29x smaller (qwen3-8b-echo2-setting.yaml [D1])
#: (row name, scenario, nested changes, worker classes kept or None): what a user would pick besides
#: the shipped files — on the WAN the broadcast (a delta costs its encode on the learner, an
#: adapter almost nothing), in ECHO-2's setting one kind of actor with leases that fill it.
VARIANTS = [
    ("qwen3-8b-256w-wan +delta versions", WAN, {"model": {"payload_gb": DELTA_GB}, "learner": {"publish_s": 24.0}},
     None),
    ("qwen3-8b-256w-wan +LoRA adapter", WAN, {"model": {"payload_gb": LORA_GB},
                                              "learner": {"publish_s": 1.0, "weight_sync_s": 1.0}}, None),
    ("qwen3-8b-echo2-setting, H200 actors", ECHO2, {"recipe": {"rollout": {"groups_per_lease": 19}}}, ["h200-spot"]),
    ("qwen3-8b-echo2-setting, RTX 5090 actors", ECHO2, {}, ["rtx5090-spot"]),
]
#: What the planner before lengths were a distribution did not read: without them every response is
#: the mean and every engine keeps its full rate to the last token.
NEW_INPUTS = {"learner": ("single_sequence_tokens_per_s", "generation_sequences", "gpu_memory_gb", "trainer_resident_gb"),
              "workload": ("lengths",)}
NEW_WORKER_INPUTS = ("single_sequence_tokens_per_s", "max_sequences", "batching")
#: The map's grid on SWEPT: worker price and learner generation speed multipliers.
PRICE_SCALES, GENERATION_SCALES = (0.5, 1.0, 2.0, 3.0), (0.5, 1.0, 2.0)
#: (what changes, nested changes to the swept scenario) for the sensitivity table.
SENSITIVITY = [
    ("as shipped", {}),
    ("worker tokens/s x 0.5", {"fleet": {"0": {"tokens_per_s": 1104.5}}}),
    ("worker tokens/s x 1.5", {"fleet": {"0": {"tokens_per_s": 3313.5}}}),
    ("learner generation tokens/s x 0.5", {"learner": {"generation_tokens_per_s_per_gpu": 7000,
                                                       "single_sequence_tokens_per_s": 155}}),
    ("co-located engine at verl's 0.5 of memory", {"learner": {"trainer_resident_gb": 32.0}}),
    ("every response at the mean", {"workload": {"lengths": {"across_cv": 0.0, "within_cv": 0.0}}}),
    ("lengths twice as spread across prompts", {"workload": {"lengths": {"across_cv": 1.2}}}),
    ("learner $2.49/GPU-h (low end of [P2])", {"learner": {"price_per_gpu_hour": 2.49}}),
    ("learner $3.99/GPU-h (high end of [P2])", {"learner": {"price_per_gpu_hour": 3.99}}),
    ("responses 4096 tokens (cap 8192)", {"workload": {"response_tokens": 4096, "lengths": {"max_tokens": 8192}}}),
    ("preemptions x 5", {"fleet": {"0": {"preemption_per_hour": 0.5}}}),
    ("worker uplinks 500 Mbit/s", {"fleet": {"0": {"upload_mbps": 500}}}),
]


def row(result: SimResult, **labels) -> dict:
    summary = result.summary()
    baseline = result.centralized
    hours = sum(result.worker_hours.values())
    point = result.payoff()
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
        "centralized_util": baseline.utilization, "generation_share": baseline.generation_share,
        "rho": point.token_price_ratio, "predicted": point.predicted,
        "runtime_s": result.runtime_s, "events": result.events,
    }


def scenario_data(path: Path, changes: dict | None = None, keep: list[str] | None = None,
                  before: bool = False) -> dict:
    """``path`` with nested ``changes``, only the worker classes named in ``keep`` (when given), and
    with ``before`` without what the planner before lengths were a distribution did not read."""
    data = merge(read_yaml(path, "scenario"), changes or {})
    if keep is not None:
        data["fleet"] = [c for c in data["fleet"] if c["name"] in keep]
    if before:
        data = copy.deepcopy(data)
        for section, keys in NEW_INPUTS.items():
            for key in keys:
                data.get(section, {}).pop(key, None)
        for worker_class in data["fleet"]:
            for key in NEW_WORKER_INPUTS:
                worker_class.pop(key, None)
    return data


def run(path: Path, steps: int | None, changes: dict | None = None, keep: list[str] | None = None,
        before: bool = False) -> SimResult:
    """Simulate ``path`` (see :func:`scenario_data`), ``steps`` learner steps when given."""
    data = scenario_data(path, merge(changes or {}, {"recipe": {"run": {"steps": steps}}} if steps else {}), keep,
                         before)
    return simulate(parse_scenario(data, str(path)), timeline_workers=0)


def sources(path: Path) -> str:
    """The source tags ``path``'s header lists (``[P1]``, ...)."""
    return ",".join(re.findall(r"^#\s+\[(\w+)\]", path.read_text(), flags=re.M))


def compared(name: str, path: Path, steps: int | None, changes: dict | None = None,
             keep: list[str] | None = None) -> dict:
    """One scenario's row, with the planner before beside it (``*_before``)."""
    before = run(path, steps, changes, keep, before=True)
    return {**row(run(path, steps, changes, keep), scenario=name, sources=sources(path)),
            "ratio_before": before.cost_usd / before.centralized.cost_usd,
            "generation_share_before": before.centralized.generation_share,
            "centralized_usd_before": before.centralized.cost_usd, "cost_usd_before": before.cost_usd}


def payoff_grid(steps: int | None, quick: bool) -> list[dict]:
    """Simulated runs of :data:`SWEPT` with the workers' price and the learner's generation speed
    scaled: points spread over the map, each with its simulated ratio."""
    base = read_yaml(SWEPT, "scenario")
    price, learner = base["fleet"][0]["price_per_hour"], base["learner"]
    rows = []
    for generation in (GENERATION_SCALES[::2] if quick else GENERATION_SCALES):
        for scale in (PRICE_SCALES[1:3] if quick else PRICE_SCALES):
            changes = {"fleet": {"0": {"price_per_hour": price * scale}},
                       "learner": {key: learner[key] * generation for key in
                                   ("generation_tokens_per_s_per_gpu", "single_sequence_tokens_per_s")}}
            rows.append(row(run(SWEPT, steps, changes), price_scale=scale, generation_scale=generation))
    return rows


def sweeps(steps: int | None, quick: bool) -> dict[str, list[dict]]:
    staleness = [0, 2, 4] if quick else [0, 1, 2, 3, 4, 6, 8]
    counts = [16, 64] if quick else [8, 16, 24, 32, 48, 64, 96]
    by_s = [row(run(SWEPT, steps, {"recipe": {"staleness": s, "protocol": "sync" if s == 0 else "async"}}), S_=s)
            for s in staleness]
    by_count = [row(run(SWEPT, steps, {"fleet": {"0": {"count": n}}}), count=n) for n in counts]
    uplinks = [300, 3000] if quick else [100, 300, 1000, 3000]
    payloads = {"bf16 weights": {}, "delta versions": VARIANTS[0][2], "LoRA adapter": VARIANTS[1][2]}
    by_bandwidth = [row(run(WAN, steps, merge(change, {"fleet": {"0": {"upload_mbps": up}, "1": {"upload_mbps": up}}})),
                        uplink_mbps=up, payload=payload)
                    for payload, change in payloads.items() for up in uplinks]
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
    rows = [compared(path.stem, path, steps) for path in paths]
    variants = [compared(name, path, steps, changes, keep)
                for name, path, changes, keep in (VARIANTS[:1] if args.quick else VARIANTS)]
    columns = ["scenario", "workers", "mean_active", "S", "util", "s_per_step", "dissemination_s", "wasted_pct",
               "cost_usd", "centralized_usd", "generation_share_before", "generation_share", "rho", "ratio_before",
               "ratio", "predicted", "runtime_s"]
    print(format_table(rows + variants, columns))
    grid = payoff_grid(steps, args.quick)
    print(f"\n{SWEPT.stem} on the map: worker price and learner generation speed scaled")
    print(format_table(grid, ["price_scale", "generation_scale", "rho", "generation_share", "util", "ratio",
                              "predicted"]))
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
    path = write_results(args.out, rows, {"quick": args.quick, "steps": steps or "as in each scenario",
                                          "variants": variants, "map": grid, **swept}, models=())  # simulated
    plot(swept, args.out)
    plot_map(rows + variants, grid, args.out)
    print(f"\nwrote {path}, {args.out / 'scenarios.png'} and {args.out / 'scenarios-map.png'}")


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


def plot_map(rows: list[dict], grid: list[dict], out: Path) -> None:
    """The map at full utilization, the grid's simulated runs and every scenario row marked on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from echo2.report.figures import draw_payoff_map

    fig, ax = plt.subplots(figsize=(15, 6.5))
    draw_payoff_map(ax, [(r["scenario"].removeprefix("qwen3-"), r["rho"], r["generation_share"], r["ratio"])
                         for r in rows])
    from matplotlib.colors import TwoSlopeNorm

    ax.scatter([min(r["rho"], 2.95) for r in grid], [r["generation_share"] for r in grid], c=[r["ratio"] for r in grid],
               cmap="RdYlGn_r", norm=TwoSlopeNorm(vmin=0.3, vcenter=1.0, vmax=3.0), marker="s", s=40, edgecolors="black",
               label=f"{SWEPT.stem}, prices and learner speed scaled (fill: simulated ratio)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Where distributing pays: (1 - g) / U + rho g at U = 1 (the simulated ratios in the key)")
    fig.tight_layout()
    fig.savefig(out / "scenarios-map.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
