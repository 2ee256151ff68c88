"""``echo2 train``: wire the roles together — coordinator, learner, local workers — and report.

The learner process hosts the coordinator (HTTP, in a background thread) and runs the learner
loop in its main thread; workers are separate processes (local ones are started here; remote
ones join with the printed ``echo2 worker`` command). Under torchrun only rank 0 does all this;
the other ranks train alongside it (:mod:`echo2.launch.ranks`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from echo2.broadcast.publisher import Publisher
from echo2.config import Config, ConfigError, LocalWorkerSpec, dump_config
from echo2.coordinator.app import create_app
from echo2.coordinator.books import Training
from echo2.coordinator.records import Limits
from echo2.coordinator.server import CoordinatorServer
from echo2.core.staleness import versions_in_use
from echo2.launch.coordinator import build_coordinator
from echo2.launch.local import LocalWorkers
from echo2.launch.ranks import adapter_spec, build_learner, load_policy, run_follower
from echo2.launch.summary import RunSummary
from echo2.launch.work import run_work
from echo2.learner.checkpoint import latest_resumable, load_resume_state
from echo2.learner.distributed import Shard, announce, start
from echo2.learner.evaluations import ProcessEvaluations
from echo2.learner.loop import LearnerLoop
from echo2.model import heap
from echo2.model.evaluation import EvalResult
from echo2.model.loading import check_cpus, load_tokenizer, pin_threads, pinned_cpus
from echo2.net.guard import viewer_credential
from echo2.net.ratelimit import RateLimiter
from echo2.net.redact import REDACTED, redact_logs, remove_redaction
from echo2.net.tls import certificate_fingerprint
from echo2.protocol import RunSpec
from echo2.report.figures import save_run_plots
from echo2.rollout.options import WorkerOptions
from echo2.telemetry.metrics import MetricsWriter, TimelineWriter
from echo2.telemetry.trackers import open_trackers

if TYPE_CHECKING:
    from echo2.launch.ray_actors import RayWorkers

log = logging.getLogger("echo2")

#: How long a local worker retries its learner's coordinator: it dies with its learner (a resumed
#: run starts its own), so it must not outlive one that is gone for good.
LOCAL_GIVE_UP_S = 120.0
#: Where a run keeps its coordinator's address and run token (owner-readable only).
COORDINATOR_FILE = "coordinator.json"
#: The run token alone (owner-readable only), for ``echo2 worker --token-file``.
TOKEN_FILE = "token"
#: The live dashboard's link with its viewer credential (owner-readable only).
DASHBOARD_FILE = "dashboard.url"


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (it holds the run token)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
        file.write(text)


def announce_dashboard(run_dir: Path, url: str, run_token: str) -> None:
    """Say where the live dashboard is. Its link carries the viewer credential, so it goes to an
    owner-only file and to the terminal only: never to ``train.log``, nor to a console redirected
    to a file others may read."""
    link = f"{url}/dashboard#token={viewer_credential(run_token)}"
    _write_private(run_dir / DASHBOARD_FILE, link + "\n")
    log.info("live dashboard at %s/dashboard: open the link in %s (owner-only; it holds the viewer token)", url,
             run_dir / DASHBOARD_FILE)
    if sys.stderr.isatty():
        print(f"live dashboard: {link}", file=sys.stderr, flush=True)


def make_run_dir(config: Config) -> Path:
    name = config.run.name or time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.run.dir) / name
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def attach_log_file(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)
    logging.getLogger("echo2").setLevel(logging.INFO)  # the run's log keeps INFO even under a quieter root
    return handler


def run_spec(config: Config, max_turns: int = 1) -> RunSpec:
    """What workers are told about the run; ``max_turns``: the task's (its episodes' model turns)."""
    return RunSpec(
        model=config.model.name, dtype=config.model.dtype,
        group_size=config.rollout.group_size, temperature=config.rollout.temperature,
        max_new_tokens=config.rollout.max_new_tokens, groups_per_lease=config.lease_groups,
        protocol=config.protocol, staleness=config.staleness, fetch_delay_s=config.emulation.fetch_delay_s,
        broadcast_stall_s=config.broadcast.stall_s, broadcast_timeout_s=config.broadcast.timeout_s,
        heartbeat_interval_s=config.coordinator.heartbeat_interval_s, seed=config.run.seed,
        engine=config.rollout.engine, adapter=adapter_spec(config), max_turns=max_turns,
        swap_between_turns=config.rollout.swap_between_turns, swap_between_steps=config.rollout.swap_between_steps,
        size_leases_to_device=config.rollout.groups_per_lease == "device",
        check_draws=config.verification.check_draws,
    )


def local_worker_options(config: Config, url: str, token: str, name_prefix: str = "local") -> list[WorkerOptions]:
    """The options of the run's ``workers.count`` workers, named ``<name_prefix>-<i>``: threads,
    device and relay from ``workers``; price, speed, latency and upload cap from
    ``emulation.fleet[i % len(fleet)]`` (its ``upload_mbps`` over ``emulation.worker_upload_mbps``). A TLS
    run's local workers pin the coordinator's certificate and serve their relays with it."""
    workers, emulation, options, tls = config.workers, config.emulation, [], config.coordinator
    secure = {"pin_sha256": (certificate_fingerprint(tls.tls_certfile),), "relay_certfile": tls.tls_certfile,
              "relay_keyfile": tls.tls_keyfile} if tls.tls_certfile else {}
    for index in range(workers.count):
        spec = emulation.fleet[index % len(emulation.fleet)] if emulation.fleet else LocalWorkerSpec()
        options.append(WorkerOptions(
            coordinator=url, token=token, name=f"{name_prefix}-{index}", threads=workers.threads,
            device=workers.device, relay=workers.relay,
            upload_mbps=spec.upload_mbps if spec.upload_mbps is not None else emulation.worker_upload_mbps,
            latency_ms=spec.latency_ms, price_per_hour=spec.price_per_hour, worker_class=spec.worker_class,
            throughput_factor=spec.throughput_factor, give_up_after_s=LOCAL_GIVE_UP_S, **secure,
        ))
    return options


def launch_workers(config: Config, url: str, token: str, log_dir: Path,
                   worker_cpus: list[int] | None = None) -> LocalWorkers | RayWorkers:
    """The run's ``workers.count`` workers: Ray actors (``launcher: ray``), or local subprocesses on
    ``worker_cpus``."""
    if config.launcher == "ray":
        from echo2.launch.ray_actors import RayWorkers

        return RayWorkers(url, local_worker_options(config, url, token, name_prefix="ray"), config, log_dir)
    return LocalWorkers(local_worker_options(config, url, token), log_dir, worker_cpus)


def _endpoint(config: Config, run_dir: Path, resuming: bool) -> tuple[int, str]:
    """Port and run token: a resumed run takes back its predecessor's (kept in ``coordinator.json``),
    so that the workers still retrying the old address reconnect by themselves. A token read as
    ``<redacted>`` (from the run's own ``config.yaml``) is the one kept there too."""
    saved = run_dir / COORDINATOR_FILE
    previous = json.loads(saved.read_text()) if saved.exists() else None
    token = config.coordinator.token
    if token == REDACTED:
        if previous is None:
            raise ConfigError(f"coordinator.token is {REDACTED} (a run's config.yaml) and {saved} does not exist: "
                              "give the run token")
        token = previous["token"]
    if resuming and previous is not None:
        return config.coordinator.port or previous["port"], token or previous["token"]
    # hex: never starts with "-", which a command line would take for an option
    return config.coordinator.port, token or secrets.token_hex(16)


def run_training(config: Config, resume_dir: Path | None = None) -> RunSummary | None:
    """Run ``config``; with ``resume_dir``, continue that run from its newest resumable checkpoint.

    Under torchrun, ranks > 0 follow rank 0's learner and return None."""
    shard = start(config.learner.sharding)
    if not shard.leader:
        run_follower(config, shard)
        return None
    try:
        check_cpus(config.learner.cpus, "learner.cpus")
        check_cpus(config.workers.cpus, "workers.cpus")
        check_cpus(config.eval.cpus, "eval.cpus")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    with pinned_cpus(config.learner.cpus) as started_on:
        # local workers get the CPUs this process started with unless told otherwise, not the learner's
        # pin; a co-located worker gets the learner's own
        worker_cpus = config.workers.cpus or (started_on if config.learner.cpus else None)
        if config.emulation.colocated:
            worker_cpus = config.learner.cpus
        return _run_as_leader(config, resume_dir, shard, worker_cpus)


def _run_as_leader(config: Config, resume_dir: Path | None, shard: Shard, worker_cpus: list[int] | None) -> RunSummary:
    """The leader's run: coordinator, local workers, learner loop, summary."""
    run_dir = resume_dir or make_run_dir(config)
    handler = attach_log_file(run_dir)
    (run_dir / "config.yaml").write_text(dump_config(config))
    pin_threads(config.learner.threads)
    torch.manual_seed(config.run.seed)
    work = run_work(config, run_dir)
    task = work.task
    checkpoint = shard.broadcast(latest_resumable(run_dir) if resume_dir else None)
    weights = str(checkpoint) if checkpoint else config.model.name
    model, tokenizer = load_policy(config, weights), load_tokenizer(weights)
    eval_examples = task.eval_examples(config.eval.size)
    resume = load_resume_state(checkpoint) if checkpoint else None
    version = resume["version"] if resume else 0
    metrics = MetricsWriter(run_dir, tensorboard=config.telemetry.tensorboard,
                            resume_after=version if resume else None, trackers=open_trackers(config, run_dir))
    timeline = TimelineWriter(run_dir)
    port, token = _endpoint(config, run_dir, resuming=resume is not None)
    publisher = Publisher(config.broadcast, keep_versions=versions_in_use(config.staleness), token=token,
                          kind="lora" if config.learner.lora.enabled else "full",
                          upload_mbps=config.emulation.learner_upload_mbps, latency_ms=config.emulation.learner_latency_ms)
    # the console and train.log never show a credential
    redaction = redact_logs(token, publisher.token, viewer_credential(token))
    state = build_coordinator(
        config, work.spec(run_spec(config, task.max_turns)),
        Limits(group_size=config.rollout.group_size, max_new_tokens=config.rollout.max_new_tokens,
               vocab_size=model.get_input_embeddings().num_embeddings, max_turns=task.max_turns),
        run_token=token, planner=publisher.planner,
        training=Training(task.train_examples(config.run.seed), config.learner.groups_per_step),
        prompts=work.prompts(weights), on_interval=timeline.interval)
    work.attach(state, tokenizer, getattr(model.config, "max_position_embeddings", None))
    if resume:
        state.restore_snapshot(resume["coordinator"], task.train_examples(config.run.seed))
    state.publish(publisher.publish(version, model))
    coordinator, limits = config.coordinator, config.limits
    registrations = RateLimiter(max(limits.registrations_burst, config.workers.count),
                                limits.registrations_per_minute)
    app = create_app(state, coordinator.lease_wait_s, https_relays_only=coordinator.tls_certfile is not None,
                     registrations=registrations, body_timeout_s=limits.body_timeout_s, run_dir=run_dir,
                     doors=work.doors(token))
    publisher.mount(app)
    work.mount(app, token, lambda: server.url)
    server = CoordinatorServer(app, coordinator.host, port, certfile=coordinator.tls_certfile,
                               keyfile=coordinator.tls_keyfile, head_timeout_s=limits.head_timeout_s)
    server.start(config.coordinator.start_timeout_s)
    _write_private(run_dir / TOKEN_FILE, token + "\n")  # before coordinator.json, which callers wait for
    _write_private(run_dir / COORDINATOR_FILE, json.dumps({"url": server.url, "port": server.port, "token": token}))
    log.info("run %s: protocol=%s S=%d, coordinator at %s", run_dir, config.protocol, config.staleness,
             server.url)
    if config.model.dtype_reason:
        log.info(config.model.dtype_reason)
    log.info("more workers can join with: echo2 worker --coordinator %s --token-file %s (an owner-only copy of "
             "that file on other machines, or the token in $ECHO2_TOKEN)%s", server.url, run_dir / TOKEN_FILE,
             f" --pin-sha256 {certificate_fingerprint(coordinator.tls_certfile)} (or --ca-file CA_BUNDLE)"
             if coordinator.tls_certfile else "")
    announce_dashboard(run_dir, server.url, token)
    workers = launch_workers(config, server.url, token, run_dir / "workers", worker_cpus)
    workers.start()
    learner = build_learner(config, model, tokenizer, checkpoint, shard)
    evaluations = None
    try:
        evaluations = work.evaluations(state, eval_examples, run_dir)
        state.wait_for_workers(config.workers.count, config.coordinator.start_timeout_s, workers.check)
        workers.supervise()
        work.start(server.url)
        loop = LearnerLoop(config, state, publisher, learner, task, eval_examples, run_dir, metrics, timeline,
                           evaluations)
        with heap.settled():
            result = loop.run(resume)
        stats = state.stats(config.activation.learner_price_per_hour, result.wall_seconds)
    finally:
        work.stop()
        if isinstance(evaluations, ProcessEvaluations):
            evaluations.stop()
        announce(shard, "stop")
        state.finish()
        workers.stop()
        server.stop()
        work.close()
        publisher.close()
        metrics.close()
        timeline.close()
    reliability = state.reliability()  # once nothing can reach the coordinator: the books are final
    save_run_plots(run_dir)
    if not result.evals:  # the evaluator failed (eval.where: process): said in train.log
        result.evals = [(0, EvalResult(math.nan, math.nan))]
    last = [e for _, e in result.evals[1:]][-3:] or [result.evals[0][1]]
    sampled = [e.sampled_reward for e in last if e.sampled_reward is not None]  # none: eval.sampled is off
    summary = RunSummary(
        run_dir=run_dir, result=result,
        accuracy_before=result.evals[0][1].accuracy,
        accuracy_after=sum(e.accuracy for e in last) / len(last),
        sampled_reward_before=result.evals[0][1].sampled_reward,
        sampled_reward_after=sum(sampled) / len(sampled) if sampled else None,
        groups_dropped=stats.groups_dropped_stale,
        workers_registered=stats.workers_registered,
        costs=stats.costs,
        reliability=reliability,
    )
    (run_dir / "reliability.json").write_text(json.dumps(reliability, indent=2))
    (run_dir / "summary.txt").write_text("\n".join(summary.lines()) + "\n")
    for line in summary.lines():
        log.info(line)
    remove_redaction(redaction)
    logging.getLogger().removeHandler(handler)
    return summary
