"""Calibrate once, predict many: the figures a calibration keeps, and the predictions built from them."""

import os

import pytest
import yaml

from echo2.cli import main
from echo2.config import ConfigError, load_config
from echo2.launch.train import run_training
from echo2.planning.calibration import Calibration, calibrate_run
from echo2.simulation.calibrate import scenario_for
from echo2.telemetry.metrics import read_jsonl


def test_calibrate_a_real_run_then_plan_and_simulate_another_config(tmp_path, capsys):
    cpus = sorted(os.sched_getaffinity(0))
    summary = run_training(load_config(overrides=[
        "run.steps=10", "eval.every=1000", "eval.size=10", "eval.show=0", "telemetry.progress=false",
        "checkpoint.every=0", "activation.enabled=false", f"run.dir={tmp_path}", "run.name=cal",
        f"learner.cpus=[{cpus[0]}]", f"workers.cpus=[{cpus[-1]}]", "emulation.fleet=[{throughput_factor: 0.5}]"]))
    assert os.sched_getaffinity(0) == set(cpus)  # the learner's pin ends with the run
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--from-run", str(summary.run_dir), "--out", str(out)]) == 0
    cal = Calibration.model_validate(yaml.safe_load(out.read_text()))
    assert 0 < cal.train_step_s < 10 and cal.train_step_s == pytest.approx(sum(cal.step_seconds) / len(cal.step_seconds))
    assert cal.rollouts_per_s > 0 and cal.full_bytes > 0 and cal.delta_bytes
    # measured per worker at factor 1: the workers ran at 0.5, so the rate is twice what they reported
    last = [r for r in read_jsonl(summary.run_dir / "metrics.jsonl") if "learner_busy_s" in r][-1]
    reported = [v for k, v in last.items() if k.startswith("worker/") and k.endswith("/samples_per_s")]
    assert cal.rollouts_per_s == pytest.approx(2 * sum(reported) / len(reported), rel=0.01)
    # the run's own lengths, per trained group after warm-up, and the engine's decode curve on this machine
    config = load_config(str(summary.run_dir / "config.yaml"))
    assert len(cal.lengths) == (10 - 3) * config.learner.groups_per_step
    assert all(len(group) == config.rollout.group_size and max(group) <= cal.max_tokens for group in cal.lengths)
    assert cal.max_tokens == config.rollout.max_new_tokens
    curve = cal.decode_curve()
    assert curve is not None and not curve.continuous and curve.step_s(32) > curve.step_s(1) > 0
    calibrated = scenario_for(load_config(overrides=["workers.count=2"]), cal)
    assert calibrated.workload.lengths.groups == cal.lengths
    assert calibrated.fleet[0].batching == "static" and calibrated.fleet[0].max_sequences == config.lease_groups * 8
    capsys.readouterr()
    assert main(["plan", "--calibration", str(out), "activation.enabled=false", "protocol=sync",
                 "workers.count=3"]) == 0
    printed = capsys.readouterr().out
    assert "every worker runs" in printed and "predicted learner utilization" in printed and "simulated" not in printed
    assert main(["plan", "--calibration", str(out), "workers.count=3", "broadcast.fan_out=2", "emulation.worker_upload_mbps=8",
                 "emulation.learner_upload_mbps=8", "run.steps=20"]) == 0
    assert "relay tree (fan-out 2) of 3 workers" in capsys.readouterr().out
    assert main(["simulate", "--calibration", str(out), "--out", str(tmp_path / "sim"), "staleness=2",
                 "run.steps=6"]) == 0
    assert (tmp_path / "sim" / "metrics.jsonl").is_file()
    assert main(["simulate", "--calibration", str(out), "configs/scenarios/none.yaml"]) == 2
    with pytest.raises(ConfigError, match="a calibration needs more than"):
        calibrate_run(_truncated(summary.run_dir, tmp_path / "short"))


def _truncated(run_dir, to):
    """A copy of ``run_dir`` with its first 4 steps only."""
    to.mkdir()
    (to / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    (to / "timeline.jsonl").write_text((run_dir / "timeline.jsonl").read_text())
    steps = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "learner_busy_s" in line]
    (to / "metrics.jsonl").write_text("\n".join(steps[:4]) + "\n")
    return to
