"""A real run directory as a scenario: the simulator fed what the run measured, to predict the run.

Measured inputs (``metrics.jsonl``, ``timeline.jsonl``), every worker its own class:

* ``T_train`` and its spread: the learner's busy intervals (training + publishing);
* each worker's rollouts/s while generating (``worker/NAME/samples_per_s``: samples over
  generation seconds) and the spread of its lease times;
* the round trip of a request: the 10th percentile of the gaps between two leases of a worker
  (pooled over the workers: local workers share the machine's loopback; the higher gaps hold
  waits for the window or for weights, which the simulator models), divided by the requests a
  lease cycle makes (submit + lease; plus the version check in ``sync``/``pull``);
* each worker's fixed per-fetch cost: its median fetch time less the transfer the bandwidth caps
  imply (on loopback without caps, the whole fetch).

From the config (inputs, not measurements): protocol, S, B, G, groups per lease, broadcast mode,
chunk size, bandwidth caps, the payload (the model's size in the broadcast dtype), prices.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from pathlib import Path

from echo2.config import ActivationRule, Config, load_config
from echo2.simulation.scenario import Scenario, parse_scenario
from echo2.telemetry.metrics import read_jsonl
from echo2.units import GB, link_bytes_per_s


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def measured(run_dir: Path) -> dict[str, float]:
    """What the run itself reports: utilization and training wall time (busy + idle), steps."""
    last = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner_busy_s" in r][-1]
    return {"steps": last["version"], "utilization": last["utilization"],
            "train_wall_s": last["learner_busy_s"] + last["learner_idle_s"]}


def float32_bytes(config: Config) -> float:
    """Bytes of the run's model in float32 (its safetensors files)."""
    from echo2.modeling import resolve_model_path

    return sum(p.stat().st_size for p in Path(resolve_model_path(config.model.name)).glob("*.safetensors"))


def scenario_from_run(run_dir: Path) -> Scenario:
    config = load_config(str(run_dir / "config.yaml"))
    timeline = read_jsonl(run_dir / "timeline.jsonl")
    last = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner_busy_s" in r][-1]
    train = [i["end"] - i["start"] for i in timeline if i["who"] == "learner"]
    by_worker: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for interval in timeline:
        if interval["who"] not in ("learner", "broadcast"):
            by_worker[interval["who"]][interval["kind"]].append(interval)
    weights = float32_bytes(config)
    payload = weights / 2 if config.broadcast.dtype == "bfloat16" else weights  # one version on the wire
    requests_per_cycle = 2 if config.protocol == "async" else 3
    gaps = [b["start"] - a["end"] for kinds in by_worker.values()
            for a, b in itertools.pairwise(sorted(kinds["generate"], key=lambda i: i["start"]))]
    rtt_ms = 1000 * statistics.quantiles(gaps, n=10)[0] / requests_per_cycle
    fleet = []
    for index, (name, kinds) in enumerate(sorted(by_worker.items())):
        spec = config.workers.fleet[index % len(config.workers.fleet)] if config.workers.fleet else None
        generate = kinds["generate"]
        upload = spec.upload_mbps if spec and spec.upload_mbps is not None else config.workers.upload_mbps
        fetches = [i["end"] - i["start"] for i in kinds["fetch"]]
        fleet.append({
            "name": name, "count": 1, "price_per_hour": spec.price_per_hour if spec else 0.0,
            "rollouts_per_s": last[f"worker/{name}/samples_per_s"],
            "throughput_cv": _cv([i["end"] - i["start"] for i in generate]),
            "rtt_ms": rtt_ms,
            "upload_mbps": upload, "relay": config.workers.relay,
            "fetch_delay_s": max(0.0, statistics.median(fetches) - _transfer_s(config, payload, len(by_worker))),
        })
    return parse_scenario({
        "name": run_dir.name, "description": f"calibrated from the real run {run_dir}",
        "model": {"name": config.model.name, "parameters_b": weights / (4 * GB), "payload_gb": payload / GB},
        "learner": {"train_step_s": statistics.fmean(train), "step_cv": _cv(train),
                    "upload_mbps": config.broadcast.learner_upload_mbps,
                    "price_per_gpu_hour": config.activation.learner_price_per_hour},
        "recipe": {"steps": config.run.steps, "groups_per_step": config.learner.groups_per_step,
                   "group_size": config.rollout.group_size, "groups_per_lease": config.rollout.groups_per_lease,
                   "protocol": config.protocol, "staleness": config.staleness,
                   "lease_timeout_s": config.coordinator.lease_timeout_s,
                   "heartbeat_timeout_s": config.coordinator.heartbeat_timeout_s,
                   "heartbeat_interval_s": min(2.0, config.coordinator.heartbeat_timeout_s / 4)},
        "broadcast": {"mode": config.broadcast.mode, "chunk_mib": config.broadcast.chunk_mib,
                      "fan_out": config.broadcast.fan_out, "learner_fan_out": config.broadcast.learner_fan_out},
        "activation": {key: getattr(config.activation, key) for key in ActivationRule.model_fields},
        "fleet": fleet,
    }, str(run_dir))


def _transfer_s(config: Config, payload: float, workers: int) -> float:
    """The transfer time the caps imply for one worker (the learner's uplink shared by a star)."""
    share = workers if config.broadcast.mode == "star" else 1
    return payload * share / link_bytes_per_s(config.broadcast.learner_upload_mbps)  # uncapped: 0
