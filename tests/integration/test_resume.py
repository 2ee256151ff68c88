"""A learner killed with SIGKILL resumes from its checkpoint: same version, same data, no prompt lost."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from state_support import make_state, prompt_stream, publish, submit_all
from waiting import wait_for

from echo2.config import load_config
from echo2.launch.train import run_training
from echo2.learner.checkpoint import latest_resumable

SMALL = ["eval.size=20", "eval.every=2", "learner.groups_per_step=8", "rollout.groups_per_lease=4",
         "telemetry.tensorboard=false", "telemetry.progress=false", "coordinator.data_timeout_s=120"]


def test_snapshot_keeps_every_prompt_and_continues_the_stream():
    state = make_state(staleness=1)
    worker = state.members.register("w")
    submit_all(state, worker, state.work.lease(worker, 0, 2, wait_s=0))  # 2 groups buffered
    state.take_batch(0, timeout_s=1)  # ... and trained
    submit_all(state, worker, state.work.lease(worker, 0, 2, wait_s=0))  # 2 more buffered
    publish(state, 1)
    in_flight = state.work.lease(worker, 1, 2, wait_s=0)  # 2 prompts out at the snapshot
    saved = json.loads(json.dumps(state.resume_snapshot()))  # plain data

    fresh = make_state(staleness=1)
    fresh.restore_snapshot(saved, prompt_stream())
    report = fresh.reliability()
    assert report["prompts_drawn"] == 6 and report["prompts_unaccounted"] == 0
    assert report["groups_trained"] == 2 and report["groups_buffered"] == 2
    assert [e.prompt for e in fresh.books.ledger.requeued] == [p.prompt for p in in_flight.prompts]  # in flight: re-queued
    assert report["leases_lost_in_restart"] == 1 and report["learner_restarts"] == 1
    # the stream continues exactly where the first state stopped drawing
    assert next(fresh.parts.examples) == next(state.parts.examples)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_learner_killed_mid_run_resumes_at_the_same_version(tmp_path):
    run_dir = tmp_path / "run"
    # every checkpoint version is also an eval version (SMALL's eval.every=2 divides checkpoint.every),
    # and the eval record is flushed before the checkpoint is written: whichever checkpoint the run
    # resumes from, the killed run's accuracy at that version is on record to compare with
    overrides = SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=10", "checkpoint.every=2",
                         "workers.count=1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    learner = subprocess.Popen([sys.executable, "-m", "echo2.cli", "train", *overrides], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    remote = None
    try:
        wait_for(lambda: (run_dir / "coordinator.json").exists(), 120, "the coordinator")
        endpoint = json.loads((run_dir / "coordinator.json").read_text())
        # a worker started by hand, as on another machine: it must outlive the learner and rejoin
        remote = subprocess.Popen([sys.executable, "-m", "echo2.cli", "worker", "--coordinator", endpoint["url"],
                                   "--token-file", str(run_dir / "token"), "--name", "remote", "--give-up-after", "300"],
                                  env=env, stdout=(tmp_path / "remote.log").open("w"), stderr=subprocess.STDOUT)
        wait_for(lambda: "registered with" in (tmp_path / "remote.log").read_text(), 120, "the remote worker")
        wait_for(lambda: (run_dir / "checkpoints" / "step_000004" / "resume.pt").exists(), 240, "checkpoint 4")
        learner.send_signal(signal.SIGKILL)
        learner.wait(timeout=30)
        before = _records(run_dir)
        resumed_at = int(latest_resumable(run_dir).name.removeprefix("step_"))

        # no local worker this time: the resumed run can only finish if the hand-started worker
        # rejoins by itself (however long its backoff takes on a busy machine; a fetch of a version
        # the dead learner announced is dropped once its heartbeat finds the session lost, see
        # test_worker_session_lost.py), so the resumed learner waits long for its first batch
        config = load_config(str(run_dir / "config.yaml"), ["telemetry.progress=false", "workers.count=0",
                                                            "coordinator.data_timeout_s=300"])
        assert config.checkpoint.every % config.eval.every == 0, "the resumed version must have an eval"
        summary = run_training(config, resume_dir=run_dir)
    finally:
        for process in (learner, remote):
            if process is not None and process.poll() is None:
                process.kill()

    after = _records(run_dir)
    versions = [r["version"] for r in after if "reward_mean" in r]
    assert versions == list(range(1, 11))  # one record per version, no gap, none twice
    # the resumed weights score what they scored when checkpointed: accuracy is not reset (checked
    # unconditionally: the config above guarantees the killed run evaluated the resumed version).
    # The tiny model's greedy accuracy barely moves in 10 steps, so the eval's sampled reward (drawn
    # with the eval's own fixed seed: a fingerprint of the exact weights) must match too
    evals = {r["version"]: r for r in before if "eval_accuracy" in r}
    assert set(range(0, resumed_at + 1, 2)) <= set(evals), sorted(evals)
    restart = next(r for r in after if r.get("resumed"))
    assert restart["version"] == resumed_at >= 4
    for metric in ("eval_accuracy", "eval_sampled_reward"):
        assert restart[metric] == evals[resumed_at][metric], (metric, restart, evals[resumed_at])
    assert summary.accuracy_before == evals[0]["eval_accuracy"]  # "before" is the original start, not the restart
    report = summary.reliability
    assert report["learner_restarts"] == 1
    assert report["prompts_unaccounted"] == 0 and report["groups_trained_twice"] == 0
    assert report["groups_trained"] == 10 * 8
    assert "registered again" in (tmp_path / "remote.log").read_text()  # the hand-started worker rejoined


def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint_and_the_reports(tmp_path):
    """SIGTERM used to leave no final checkpoint and no reliability report for that segment."""
    run_dir = tmp_path / "run"
    overrides = SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=1000", "checkpoint.every=0",
                         "eval.every=1000", "workers.count=1"]
    learner = subprocess.Popen([sys.executable, "-m", "echo2.cli", "train", *overrides],
                               env={**os.environ, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (run_dir / "metrics.jsonl").exists() and
                 sum("reward_mean" in r for r in _records(run_dir)) >= 3, 240, "a few learner steps")
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=120) == 0
    finally:
        if learner.poll() is None:
            learner.kill()
    stopped_at = int(latest_resumable(run_dir).name.removeprefix("step_"))
    steps = [r["version"] for r in _records(run_dir) if "reward_mean" in r]
    assert stopped_at == steps[-1] >= 3  # the last finished step, checkpointed and resumable
    report = json.loads((run_dir / "reliability.json").read_text())
    assert report["groups_trained"] == stopped_at * 8 and report["prompts_unaccounted"] == 0
    assert "stopped by a signal after step" in (run_dir / "summary.txt").read_text()


def test_a_learner_starved_of_data_stops_checkpointed_with_its_reports(tmp_path):
    """No batch within coordinator.data_timeout_s (here: no worker at all) used to kill the learner
    with a TimeoutError and leave no checkpoint and no reliability.json: the books of why it starved."""
    from echo2.cli import main

    overrides = SMALL + [f"run.dir={tmp_path}", "run.name=run", "run.steps=5", "workers.count=0",
                         "coordinator.data_timeout_s=2", "eval.every=1000"]
    assert main(["train", *overrides]) == 1  # not done: a non-zero exit, after the books are written
    run_dir = tmp_path / "run"
    assert latest_resumable(run_dir).name == "step_000000"
    report = json.loads((run_dir / "reliability.json").read_text())
    assert report["groups_trained"] == 0 and report["prompts_unaccounted"] == 0
    summary = (run_dir / "summary.txt").read_text()
    assert "starved of data" in summary and "coordinator.data_timeout_s=2s" in summary
