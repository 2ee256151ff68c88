"""A run configuration as a simulator scenario, timed by a calibration (``echo2 simulate --calibration``).

What the configuration states is taken from it — the scenario's recipe is the config itself
(protocol, S, B, G, groups per lease, lease and heartbeat timing) — and so are the broadcast
mode and chunk size, every local worker's speed (``throughput_factor``), uplink, relay and price,
the learner's uplink, the activation rule. What nobody can state comes from one calibration run
(:mod:`echo2.planning.calibration`), measured on another configuration:

* the learner's step time and its spread;
* each worker's generation rate: the calibrated rate at factor 1 times its factor, with the
  calibrated spread of lease times;
* the round trip of a request: the calibrated lease overhead split over the requests of the
  calibration's lease cycle (the simulator makes as many per cycle as the config's protocol does);
* the fixed cost of a fetch; the payload: one version as the config's encoding ships it;
* when the calibration has them, the run's own response lengths per group, and the engine's decode
  curve: each local worker then drains a lease of ``groups_per_lease x G`` rows as echo2's engine
  does, one static batch until its longest row is done, at its ``throughput_factor`` times the
  curve's speed times its share of a core (:func:`echo2.planning.calibration.core_share`: the
  curve stands for a core of its own), and the lengths drawn per group carry the task's tails into the prediction.
"""

from __future__ import annotations

from pathlib import Path

from echo2.config import ActivationRule, Config, ConfigError
from echo2.planning.calibration import Calibration, core_share
from echo2.simulation.scenario import Scenario, parse_scenario
from echo2.telemetry.metrics import read_jsonl
from echo2.units import GB


def measured(run_dir: Path) -> dict[str, float]:
    """What a real run reports: utilization and training wall time after the first batch (busy + idle), steps."""
    last = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner_busy_s" in r][-1]
    return {"steps": last["version"], "utilization": last["utilization"],
            "train_wall_s": last["learner_busy_s"] + last["learner_idle_s"]}


def scenario_for(config: Config, calibration: Calibration, name: str = "calibrated") -> Scenario:
    """``config`` as the simulator runs it, with the measured figures of ``calibration``."""
    if calibration.model != config.model.name:
        raise ConfigError(f"the calibration measured model {calibration.model!r}, the config runs "
                          f"{config.model.name!r}: calibrate this model first (echo2 calibrate)")
    fleet, specs = [], config.emulation.fleet
    curve, lengths = calibration.decode_curve(), calibration.response_lengths()
    rows, share = config.lease_groups * config.rollout.group_size, core_share(config)
    for index in range(config.workers.count):
        spec = specs[index % len(specs)] if specs else None
        factor = spec.throughput_factor if spec else 1.0
        speed = ({"rollouts_per_s": calibration.rollouts_per_s * factor} if curve is None or rows < 2 else
                 {"tokens_per_s": factor * share * curve.tokens_per_s(rows), "max_sequences": rows,
                  "batching": "static", "single_sequence_tokens_per_s": factor * share * curve.tokens_per_s(1)})
        fleet.append({
            "name": f"local-{index}", "count": 1, "price_per_hour": spec.price_per_hour if spec else 0.0,
            **speed, "throughput_cv": 0.0 if lengths and curve else calibration.throughput_cv,
            "rtt_ms": 1000 * calibration.request_s(),
            "upload_mbps": spec.upload_mbps if spec and spec.upload_mbps is not None else config.emulation.worker_upload_mbps,
            "relay": config.workers.relay, "fetch_delay_s": calibration.fetch_s + config.emulation.fetch_delay_s,
        })
    if not fleet:
        raise ConfigError("workers.count is 0: nothing to simulate")
    return parse_scenario({
        "name": name, "description": f"{name}: the config, timed by the calibration of {calibration.source}",
        "model": {"name": config.model.name, "parameters_b": calibration.full_bytes / (4 * GB),
                  "payload_gb": calibration.version_bytes(config) / GB},
        "learner": {"train_step_s": calibration.step_s(config.run.steps), "step_cv": calibration.train_step_cv,
                    "upload_mbps": config.emulation.learner_upload_mbps,
                    "price_per_gpu_hour": config.activation.learner_price_per_hour},
        "recipe": config,
        **({"workload": {"lengths": lengths.model_dump(mode="json")}} if lengths and curve else {}),
        "broadcast": {"mode": config.broadcast.mode, "chunk_mib": config.broadcast.chunk_mib,
                      "fan_out": config.broadcast.fan_out, "learner_fan_out": config.broadcast.learner_fan_out,
                      "stall_s": config.broadcast.stall_s},
        "activation": {key: getattr(config.activation, key) for key in ActivationRule.model_fields},
        "fleet": fleet,
    }, name)

