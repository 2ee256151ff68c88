"""``echo2 serve``: echo2 as a Tinker-compatible training service, its sampling done by the fleet.

One process hosts the coordinator and the Tinker API on one server (:mod:`echo2.service`): the
clients' training runs on this process's base model, their sampling on the workers — the local
ones started here (``workers.count``) and any remote ``echo2 worker`` that joins with the run
token, exactly as for ``echo2 train``. The service's folder (``service.dir``) keeps the API keys
(hashed, one tenant per key: :mod:`echo2.service.keys`; the operator's own also in ``api_key``),
the run token owner-only, the address, and every save; started again on it, the service answers
at the same address with the same keys, and clients resume from their saves.
"""

from __future__ import annotations

import json
import logging
import secrets
import signal
import sys
import threading
from pathlib import Path

from echo2.broadcast.payload import PAYLOAD_DTYPES
from echo2.broadcast.publisher import Publisher
from echo2.config import Config, dump_config
from echo2.coordinator.app import create_app
from echo2.coordinator.records import Limits
from echo2.coordinator.server import CoordinatorServer
from echo2.launch.coordinator import build_coordinator
from echo2.launch.train import COORDINATOR_FILE, TOKEN_FILE, _write_private, launch_workers, run_spec
from echo2.model import heap
from echo2.model.draws import draw_tolerance
from echo2.model.loading import load_model, load_tokenizer, pin_threads
from echo2.model.sources import resolve_model_path
from echo2.net.ratelimit import RateLimiter
from echo2.net.redact import redact_logs, remove_redaction
from echo2.service.api import PREFIX, tinker_door, tinker_router
from echo2.service.budget import MemoryBudget, ServiceLimits
from echo2.service.checkpoints import CheckpointStore
from echo2.service.keys import DEFAULT_TENANT, ApiKeys
from echo2.service.sampling import AuditSettings, SamplingDesk, SamplingLimits
from echo2.service.service import BaseModelInfo, TinkerService
from echo2.service.training import TrainingModels

log = logging.getLogger("echo2")

#: The API key clients present (``X-API-Key``; owner-readable only).
API_KEY_FILE = "api_key"
#: Seconds between the service's own sweeps of its coordinator's books (dead workers, overdue leases).
REAP_EVERY_S = 1.0


def _kept(folder: Path, config: Config) -> tuple[int, str]:
    """Port and run token: those of the service that ran on ``folder`` before, else new."""
    saved = folder / COORDINATOR_FILE
    previous = json.loads(saved.read_text()) if saved.exists() else {}
    return (config.coordinator.port or previous.get("port", 0), config.coordinator.token or previous.get("token")
            or secrets.token_hex(16))


def operator_keys(folder: Path) -> tuple[ApiKeys, str | None]:
    """The service's key store, with the operator's own tenant (:data:`DEFAULT_TENANT`) issued on
    the first start: its key is written owner-only to ``api_key`` (what ``echo2 serve`` tells the
    operator to export), the store keeps its hash. A folder of a service from before tenants keeps
    its key, as that tenant's. Returns the store and the operator's key (None once it was revoked)."""
    keys, key_file = ApiKeys(folder), folder / API_KEY_FILE
    if not any(entry["tenant"] == DEFAULT_TENANT for entry in keys.listing()):
        key = keys.issue(DEFAULT_TENANT, key_file.read_text().strip() if key_file.exists() else None)
        _write_private(key_file, key + "\n")
    key = key_file.read_text().strip() if key_file.exists() else None
    return keys, key if keys.tenant_of(key) is not None else None


def run_service(config: Config, stop: threading.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop``)."""
    stop = stop or threading.Event()
    folder = Path(config.service.dir)
    folder.mkdir(parents=True, exist_ok=True)
    log_file = logging.FileHandler(folder / "service.log")
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(log_file)
    logging.getLogger("echo2").setLevel(logging.INFO)
    (folder / "config.yaml").write_text(dump_config(config))
    port, token = _kept(folder, config)
    keys, api_key = operator_keys(folder)
    publisher = Publisher(config.broadcast, keep_versions=4, token=token, kind="bundle",
                          upload_mbps=config.emulation.learner_upload_mbps,
                          latency_ms=config.emulation.learner_latency_ms)
    redaction = redact_logs(token, publisher.token, *([api_key] if api_key else []))
    pin_threads(config.learner.threads)
    base, tokenizer = load_model(config.model.name, config.model.dtype), load_tokenizer(config.model.name)
    state = build_coordinator(
        config, run_spec(config).model_copy(update={"sampler_bundles": True, "adapter": None,
                                                    "max_lora_rank": config.service.max_lora_rank}),
        Limits(group_size=config.rollout.group_size, max_new_tokens=config.service.max_tokens,
               vocab_size=base.get_input_embeddings().num_embeddings),
        run_token=token, planner=publisher.planner, training=None)  # its clients train on data of their own
    models = TrainingModels(base, tokenizer, lora_alpha=config.service.lora_alpha,
                            max_rank=config.service.max_lora_rank, micro_batch=config.learner.micro_batch,
                            compute_dtype=config.model.dtype, max_learning_rate=config.service.max_learning_rate)
    max_context = getattr(base.config, "max_position_embeddings", None)
    audits = config.verification
    service = TinkerService(
        BaseModelInfo(config.model.name, resolve_model_path(config.model.name), type(base).__name__, max_context),
        models, CheckpointStore(folder / "checkpoints"), session_timeout_s=config.service.session_timeout_s,
        gap_timeout_s=config.service.turn_timeout_s,
        limits=ServiceLimits(config.service.max_sessions_per_key, config.service.max_clients_per_key,
                             config.service.max_clients),
        budget=MemoryBudget(config.service.memory_budget_gb, models.client_bytes),
        sampling=lambda futures, turns: SamplingDesk(
            state, publisher, models, turns, futures,
            SamplingLimits(config.service.max_tokens, config.service.max_samples, max_context,
                           config.service.sample_timeout_s, config.service.sampler_idle_s),
            AuditSettings(audits.probation_groups, audits.audit_decay, audits.audit_floor, audits.logprob_tolerance,
                          audits.check_draws, draw_tolerance(audits.draw_tolerance, config.model.dtype, config.rollout.engine)),
            PAYLOAD_DTYPES[config.broadcast.dtype], seed=config.run.seed))
    if dropped := service.checkpoints.sweep(DEFAULT_TENANT):
        log.info("dropped %d half-written save(s) a stopped service left", dropped)
    desk = service.sampling
    assert desk is not None
    state.add_source(desk)  # the clients' requests
    desk.publish()  # version 0: the base model's own sampler, what workers fetch first
    desk.wait_published()
    coordinator, limits = config.coordinator, config.limits
    app = create_app(state, coordinator.lease_wait_s, https_relays_only=coordinator.tls_certfile is not None,
                     registrations=RateLimiter(max(limits.registrations_burst, config.workers.count),
                                               limits.registrations_per_minute),
                     body_timeout_s=limits.body_timeout_s, run_dir=folder, doors={PREFIX: tinker_door(keys)},
                     service_view=service.view)
    publisher.mount(app)
    app.include_router(tinker_router(service, keys, wait_s=config.service.poll_s))
    server = CoordinatorServer(app, coordinator.host, port, certfile=coordinator.tls_certfile,
                               keyfile=coordinator.tls_keyfile, head_timeout_s=limits.head_timeout_s)
    server.start(coordinator.start_timeout_s)
    _write_private(folder / TOKEN_FILE, token + "\n")
    _write_private(folder / COORDINATOR_FILE, json.dumps({"url": server.url, "port": server.port, "token": token}))
    log.info("echo2 serve: %s on %s, its sampling on the fleet; workers join with: echo2 worker --coordinator %s "
             "--token-file %s", config.model.name, server.url, server.url, folder / TOKEN_FILE)
    if config.model.dtype_reason:
        log.info(config.model.dtype_reason)
    print(f"export TINKER_BASE_URL={server.url}\n" + (
          f"export TINKER_API_KEY=$(cat {folder / API_KEY_FILE})" if api_key else
          f"# the operator's key was revoked: give each user a key of their own with "
          f"echo2 serve keys add NAME service.dir={folder}"), file=sys.stdout, flush=True)
    workers = launch_workers(config, server.url, token, folder / "workers")
    workers.start()
    workers.supervise()
    service.start_reaper()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        with heap.settled():
            while not stop.wait(REAP_EVERY_S):
                state.members.reap()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        state.finish()
        workers.stop()
        server.stop()
        service.close()
        publisher.close()
        log.info("echo2 serve stopped; saves kept under %s", folder / "checkpoints")
        remove_redaction(redaction)
        logging.getLogger().removeHandler(log_file)

