"""Weights & Biases and trackio get what TensorBoard gets: one short real run with both on, offline,
read back from the files each tracker keeps in the run directory."""

import json
import sqlite3
import struct
import sys
from pathlib import Path

import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto.wandb_internal_pb2 import Record

from echo2.config import load_config
from echo2.launch.train import run_training

#: The run token, given on the command line as ``echo2 train ... coordinator.token=...`` would.
SECRET = "trackers-test-run-token-5f0c2a9e"

Steps = dict[str, set[int]]


def tensorboard_scalars(folder: Path) -> Steps:
    """Each scalar's name and the steps TensorBoard has it at."""
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def wandb_records(path: Path):
    """The records of a ``.wandb`` transaction log: after a 7-byte header, LevelDB's log format
    (32 KiB blocks of chunks, each ``crc32 u32, length u16, type u8`` then the bytes; a record
    is one FULL chunk or FIRST, MIDDLE..., LAST) around ``wandb_internal.Record`` protobufs."""
    data, position, pending = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        length, kind = struct.unpack("<HB", data[position + 4:position + 7])
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL, LAST
            yield Record.FromString(pending)
            pending = b""


def wandb_run(folder: Path) -> tuple[Steps, dict]:
    """The scalars (name -> steps) and config of the one offline W&B run under ``folder``."""
    (log,) = folder.glob("offline-run-*/run-*.wandb")
    steps: Steps = {}
    config: dict = {}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        config.update({u.key: json.loads(u.value_json) for u in updates if not u.key.startswith("_")})
        for item in record.history.item if kind == "history" else []:
            name = item.key or "/".join(item.nested_key)
            if not name.startswith("_"):  # _step, _runtime, _timestamp: W&B's own
                steps.setdefault(name, set()).add(record.history.step.num)
    return steps, config


def trackio_run(database: Path) -> tuple[Steps, dict]:
    """The scalars (name -> steps) and config of the one run in a trackio project database."""
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT step, metrics FROM metrics").fetchall()
        ((config,),) = db.execute("SELECT config FROM configs").fetchall()
    steps: Steps = {}
    for step, metrics in rows:
        for name in json.loads(metrics):
            steps.setdefault(name, set()).add(step)
    return steps, {k: v for k, v in json.loads(config).items() if not k.startswith("_")}


def test_wandb_and_trackio_get_tensorboards_scalars_and_the_redacted_config_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for name in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):  # these would send trackio's data away
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRACKIO_DIR", "")  # unset to trackio (and to echo2), restored afterwards
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "home" / name))
    monkeypatch.setattr(sys, "argv", ["echo2", "train", f"coordinator.token={SECRET}"])
    config = load_config(overrides=[
        f"run.dir={tmp_path}", "run.name=run", "run.steps=3", "eval.size=20", "eval.every=2",
        "learner.groups_per_step=8", "rollout.groups_per_lease=4", "telemetry.progress=false", "checkpoint.every=0",
        "telemetry.tensorboard=true", "telemetry.wandb=true", "telemetry.trackio=true", f"coordinator.token={SECRET}"])
    run_dir = run_training(config).run_dir

    tensorboard = tensorboard_scalars(run_dir / "tensorboard")
    wandb_steps, wandb_config = wandb_run(run_dir / "wandb")
    trackio_steps, trackio_config = trackio_run(run_dir / "trackio" / "echo2.db")
    assert {"reward_mean", "eval_accuracy", "version"} <= set(tensorboard) and tensorboard["reward_mean"] == {1, 2, 3}
    assert "resumed" not in tensorboard  # a flag: in metrics.jsonl only
    assert wandb_steps == tensorboard
    assert trackio_steps == tensorboard
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["coordinator"]["token"] == "<redacted>" and saved["telemetry"]["wandb"] is True
    assert wandb_config == saved
    assert trackio_config == saved
    kept = [p for folder in ("wandb", "trackio") for p in (run_dir / folder).rglob("*") if p.is_file()]
    assert kept and [p for p in kept if SECRET.encode() in p.read_bytes()] == []
