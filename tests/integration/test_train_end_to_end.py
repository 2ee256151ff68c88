"""End to end on loopback: the learner hosting the coordinator, two real worker processes."""

import json
import re

import pytest

from echo2.config import load_config
from echo2.launch.train import run_training

SMALL = ["run.steps=4", "eval.size=20", "eval.every=2", "learner.groups_per_step=8", "rollout.groups_per_lease=4",
         "telemetry.tensorboard=false", "telemetry.progress=false", "coordinator.data_timeout_s=120"]


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("protocol,staleness", [("async", 1), ("sync", 0)])
def test_training_over_real_worker_processes(tmp_path, protocol, staleness):
    config = load_config(overrides=SMALL + [f"run.dir={tmp_path}", "run.name=run", f"protocol={protocol}",
                                            f"staleness={staleness}"])
    summary = run_training(config)
    steps = [r for r in _records(summary.run_dir) if "reward_mean" in r]
    assert [r["version"] for r in steps] == [1, 2, 3, 4]  # versions advance, one per learner step
    assert all(r["staleness_max"] <= staleness for r in steps)  # never trained on a group older than S
    assert all(r["samples"] == 8 * 8 for r in steps)
    contributors = {key.split("/")[1] for r in steps for key in r if key.startswith("worker/")}
    assert contributors and contributors <= {"local-0", "local-1"}
    # rewards were computed by the coordinator; new workers are on probation: every group audited
    assert steps[-1]["reward_seconds"] > 0
    assert all(r["audit_rate_mean"] == 1.0 and r["audited_groups"] == 8 and r["audit_seconds"] > 0 for r in steps)
    if staleness == 0:
        # sampling and training see the same policy: importance ratios are 1 up to float error
        trained = [r for r in steps if r["trained_sequences"] > 0]
        assert trained
        for r in trained:
            assert abs(r["ratio_mean"] - 1) < 1e-3 and r["ratio_max"] < 1 + 2e-3 and r["ratio_min"] > 1 - 2e-3
    run_dir = summary.run_dir
    for name in ("config.yaml", "curves.png", "timeline.png", "summary.txt", "train.log"):
        assert (run_dir / name).exists(), name
    assert (run_dir / "checkpoints" / "step_000004" / "model.safetensors").exists()
    intervals = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    assert {"train", "generate", "fetch"} <= {i["kind"] for i in intervals} <= {"train", "generate", "fetch",
                                                                                "disseminate"}
    assert summary.workers_registered == 2  # both worker processes joined over HTTP
    assert any("dissemination_s" in r for r in _records(run_dir))  # publish -> last worker loaded, per version
    # the default broadcast is pipelined: the second worker in the chain got chunks from the first one
    logs = "".join(p.read_text() for p in (run_dir / "workers").glob("*.log"))
    peer_chunks = [line for line in logs.splitlines() if " chunks in " in line and "from http" in line]
    coordinator = re.search(r"registered with (http://\S+)", logs).group(1)
    assert peer_chunks and any(coordinator not in line for line in peer_chunks)
    # a lease's groups went out as their rows finished, the last with the lease's final submission
    accepted = [int(count) for count in re.findall(r"lease \S+: (\d+) groups accepted", logs)]
    assert "groups accepted (a part)" in logs and sum(accepted) == summary.reliability["groups_accepted"]
    assert summary.reliability["prompts_unaccounted"] == 0


def test_eval_command_on_a_checkpoint(tmp_path, capsys):
    from echo2.cli import main

    config = load_config(overrides=SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=2", "workers.count=1"])
    summary = run_training(config)
    capsys.readouterr()
    checkpoint = str(summary.run_dir / "checkpoints" / "step_000002")
    assert main(["eval", checkpoint, "--size", "30"]) == 0
    out = capsys.readouterr().out
    assert "held-out greedy accuracy" in out and "(30 prompts" in out
    # overrides after an option reach the config: 2-operand prompts only
    assert main(["eval", checkpoint, "--size", "10", "task.options.num_operands=2", "eval.show=10"]) == 0
    shown = [line.split("=")[0] for line in capsys.readouterr().out.splitlines() if "(reward" in line]
    assert shown and all(prompt.count("+") + prompt.count("-") == 1 for prompt in shown)
    with pytest.raises(SystemExit):
        main(["eval", checkpoint, "--size", "10", "--nope"])


def test_dapo_with_decoupled_correction_and_echoclip_over_real_workers(tmp_path):
    config = load_config(overrides=SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=3", "learner.loss=dapo",
                                            "learner.correction=decoupled", "learner.echoclip.enabled=true"])
    summary = run_training(config)
    steps = [r for r in _records(summary.run_dir) if "reward_mean" in r]
    assert [r["version"] for r in steps] == [1, 2, 3]
    for r in steps:
        assert r["samples"] == 8 * 8  # filtered groups were replaced: every step trains on B groups
        assert r["dapo_drawn_groups"] == 8 + r["dapo_filtered_groups"]
        assert {"behaviour_weight_mean", "behaviour_weight_truncated_fraction", "echoclip_tokens",
                "echoclip_loss", "degenerate_all_correct_fraction", "overlong_penalty_mean"} <= set(r)
    reliability = json.loads((summary.run_dir / "reliability.json").read_text())
    assert reliability["groups_filtered_degenerate"] == sum(r["dapo_filtered_groups"] for r in steps)
    assert reliability["prompts_unaccounted"] == 0
    assert (summary.run_dir / "curves.png").exists()


def test_the_colocated_baseline_trains_with_one_worker_taking_turns_with_the_learner(tmp_path):
    config = load_config(overrides=SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=3",
                                            "emulation.colocated=true", "protocol=sync", "learner.cpus=[0]"])
    assert (config.workers.count, config.staleness) == (1, 0)
    summary = run_training(config)
    steps = [r for r in _records(summary.run_dir) if "reward_mean" in r]
    assert [r["version"] for r in steps] == [1, 2, 3] and all(r["staleness_max"] == 0 for r in steps)
    assert summary.workers_registered == 1
    assert {key.split("/")[1] for r in steps for key in r if key.startswith("worker/")} == {"local-0"}


def test_in_flight_updates_switch_versions_mid_sequence_and_pass_their_audits(tmp_path):
    """``rollout.swap_between_steps``: real workers take each new version between two decoding steps;
    groups that span two versions are trained, every span audited at its own version, none refused."""
    config = load_config(overrides=SMALL + [f"run.dir={tmp_path}", "run.name=run", "protocol=async", "staleness=1",
                                            "rollout.swap_between_steps=true", "run.steps=8", "rollout.groups_per_lease=8",
                                            "rollout.max_new_tokens=48", "workers.count=1",
                                            # a device a tenth as fast: versions arrive while it decodes
                                            "emulation.fleet=[{throughput_factor: 0.1}]"])
    summary = run_training(config)
    steps = [r for r in _records(summary.run_dir) if "reward_mean" in r]
    assert len(steps) == 8 and sum(r["groups_spanning_versions"] for r in steps) > 0
    assert all(abs(sum(v for k, v in r.items() if k.startswith("token_staleness_share_")) - 1) < 1e-9 for r in steps)
    # groups spanning two versions were audited (span by span, each at its own version) and passed
    assert sum(r["audited_groups"] for r in steps if r["groups_spanning_versions"]) > 0
    report = summary.reliability
    assert report["workers_quarantined"] == 0 and report["prompts_unaccounted"] == 0
