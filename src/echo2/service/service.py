"""The training service behind the Tinker routes: sessions, training clients, saves, futures.

Each mutating call becomes work queued in its client's ``seq_id`` order (:mod:`.turns`) and
answers a future at once (:mod:`.futures`); the routes (:mod:`.api`) only parse, check and
encode. What the service holds for a session (its training clients) is released when the
session ends or falls silent (:mod:`.sessions`); what a client saved stays on disk
(:mod:`.checkpoints`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from tinker import types

from echo2.coordinator.dashboard import ServiceView, SessionRow, TrainingClientRow
from echo2.learner.objectives.tinker_losses import LossSpec, UnsupportedLoss
from echo2.rollout.engines.bundles import BASE_SAMPLER
from echo2.service.budget import MemoryBudget, ServiceLimits
from echo2.service.checkpoints import CheckpointStore
from echo2.service.futures import Futures
from echo2.service.sampling import DeskCounts, SamplingDesk
from echo2.service.sessions import Session, Sessions
from echo2.service.training import TrainingModels, adam_problem
from echo2.service.turns import RequestError, Turns
from echo2.service.wire import ProtoResult, forward_backward_output

log = logging.getLogger("echo2.service")

REFUSALS = (RequestError, UnsupportedLoss)  # ConflictingRetry is a RequestError, answered 409
"""What a request the service cannot serve raises: its client's fault, answered 400 with the reason."""


@dataclass(frozen=True)
class BaseModelInfo:
    """The one base model the service trains and samples."""

    name: str
    """As clients name it (``base_model``) and as ``echo2 train``'s ``model.name`` takes it."""
    tokenizer_id: str
    """What ``get_info`` tells the SDK to load its tokenizer from (a local folder: no network)."""
    arch: str
    max_context: int | None


class TinkerService:
    """``sampling(futures, turns)`` builds the fleet's side (:class:`~echo2.service.sampling.SamplingDesk`),
    handed the service's futures and work queue; None: a service that trains only.

    Every call names its *tenant* (the key's, :mod:`echo2.service.keys`): sessions are created
    for one, and whatever hangs off a session — training clients, sampling sessions, their
    ``seq_id`` turns — is found only under it, saves under its own folder, futures only by it.
    Another tenant's ids get the refusal an unknown id gets, word for word: no oracle of what
    exists. ``limits`` and ``budget`` bound what the service holds (:mod:`echo2.service.budget`)."""

    def __init__(self, base: BaseModelInfo, models: TrainingModels, checkpoints: CheckpointStore, *,
                 session_timeout_s: float, gap_timeout_s: float, limits: ServiceLimits, budget: MemoryBudget,
                 sampling: Callable[[Futures, Turns], SamplingDesk] | None = None) -> None:
        self.base, self.models, self.checkpoints = base, models, checkpoints
        self.limits, self.budget = limits, budget
        self.futures = Futures()
        self.turns = Turns(self.futures, gap_timeout_s=gap_timeout_s)
        self.sampling = sampling(self.futures, self.turns) if sampling else None
        self.sessions = Sessions(session_timeout_s)
        self.owner: dict[str, str] = {}
        """Model id -> the session that created it."""
        self.last_request: dict[str, float] = {}
        self.training_s = 0.0
        """Seconds spent running forward-backward and optimizer steps (the training itself, beside
        which the API layer's own time is measured: ``bench/tinker_service.py``)."""
        self.api = ApiClock()
        self._trained_before_step = 0.0
        self._stop = threading.Event()

    # ------------------------------------------------------------------ sessions
    def create_session(self, request: types.CreateSessionRequest, tenant: str) -> Session:
        if (held := sum(s.tenant == tenant for s in self.sessions.live())) >= self.limits.sessions_per_key:
            raise RequestError(f"this key has {held} live sessions, the most service.max_sessions_per_key allows: "
                               f"finish one (ServiceClient.close) or wait for a silent one to end")
        session = self.sessions.create(request.tags, request.sdk_version, tenant)
        log.info("session %s opened for %s (tinker SDK %s)", session.session_id, tenant, request.sdk_version)
        return session

    def heartbeat(self, session_id: str, tenant: str) -> bool:
        """Whether ``tenant``'s session ``session_id`` is live (its silence timer restarted)."""
        return self._owned_session(session_id, tenant) is not None and self.sessions.heartbeat(session_id)

    def finish(self, session_id: str, tenant: str) -> None:
        if self._owned_session(session_id, tenant) is not None:
            self.end_session(session_id, "finished by its client")

    def end_session(self, session_id: str, why: str) -> None:
        session = self.sessions.end(session_id)
        if session is not None:
            self._release(session, why)

    def reap(self) -> None:
        """End the sessions that fell silent, fail requests stuck waiting for their turn, and retire
        the samplers no client will use again."""
        for session in self.sessions.silent():
            self._release(session, f"silent for {self.sessions.timeout_s:.0f}s")
        self.turns.expire_gaps()
        if self.sampling is not None:
            self.sampling.lane.submit("retire", None, self.sampling.retire)

    def _release(self, session: Session, why: str) -> None:
        log.info("session %s ended (%s): releasing %d training client(s)", session.session_id, why, len(session.models))
        for model_id in list(session.models):
            self.unload(model_id)
        if self.sampling is not None:
            self.sampling.end_session(session.session_id)

    def unload_model(self, model_id: str, tenant: str) -> str:
        """A client's ``unload_model``: ``tenant``'s training client released (the request id)."""
        self.model_session(model_id, tenant)
        return self.unload(model_id, tenant)

    def unload(self, model_id: str, tenant: str | None = None) -> str:
        """Release one training client (its adapter and optimizer state; its saves stay): the request id."""
        session = self.sessions.get(self.owner.pop(model_id, ""))
        if session is not None and model_id in session.models:
            session.models.remove(model_id)
        self.turns.forget(model_id)

        def release() -> types.UnloadModelResponse:
            self.models.release(model_id)
            return types.UnloadModelResponse(model_id=model_id)

        return self.turns.submit(f"unload:{model_id}", None, release, owner=tenant)

    def start_reaper(self, every_s: float = 5.0) -> None:
        """:meth:`reap` every ``every_s`` on a daemon thread, until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.reap()

        threading.Thread(target=loop, daemon=True, name="echo2-service-reaper").start()

    def _owned_session(self, session_id: str, tenant: str) -> Session | None:
        """``session_id`` if it is live and ``tenant``'s: another key's session is no session at all."""
        session = self.sessions.get(session_id)
        return session if session is not None and session.tenant == tenant else None

    def live_session(self, session_id: str, tenant: str) -> Session:
        session = self._owned_session(session_id, tenant)
        if session is None:
            raise RequestError(f"no live session {session_id!r} (finished, silent past "
                               f"{self.sessions.timeout_s:.0f}s, or never opened)")
        return session

    def model_session(self, model_id: str, tenant: str) -> str:
        """The live session owning ``model_id``, ``tenant``'s; the same clear error for an unknown,
        released or another key's one (no oracle of which)."""
        session = self.sessions.get(self.owner.get(model_id, ""))
        if session is None or session.tenant != tenant:
            raise RequestError(f"no training client {model_id!r} (released with its session, or never created)")
        self.last_request[model_id] = time.time()
        return session.session_id

    # ------------------------------------------------------------------ training clients
    def create_model(self, request: types.CreateModelRequest, tenant: str, fingerprint: str | None = None) -> str:
        session = self.live_session(request.session_id, tenant)
        self._check_base(request.base_model)
        if request.optimizer_config.type != "adamw":
            raise RequestError(f"optimizer {request.optimizer_config.type!r} is not served here: adamw only")
        model_id = f"{session.session_id}:train:{request.model_seq_id}"

        def create() -> types.CreateModelResponse:
            self.models.create(model_id, request.lora_config)
            return types.CreateModelResponse(model_id=model_id)

        if model_id not in self.owner:
            self._admit_client(tenant)
        request_id = self.turns.submit(model_id, 0, create, fingerprint, owner=tenant)
        if model_id not in self.owner:
            self.owner[model_id] = session.session_id
            session.models.append(model_id)
        return request_id

    def _admit_client(self, tenant: str) -> None:
        """A new training client for ``tenant`` within the limits (per key, in all, and the memory
        budget: :mod:`echo2.service.budget`), else the refusal naming the limit."""
        owners = [session for session_id in self.owner.values() if (session := self.sessions.get(session_id))]
        mine = sum(session.tenant == tenant for session in owners)
        if mine >= self.limits.clients_per_key:
            raise RequestError(f"this key has {mine} training clients, the most service.max_clients_per_key "
                               f"allows: unload one (or end its session) first")
        if len(owners) >= self.limits.clients:
            raise RequestError(f"the service holds {len(owners)} training clients, the most service.max_clients "
                               f"allows: try again when one is released")
        self.budget.admit()

    @contextmanager
    def _turn_taken_if_refused(self, model_id: str, seq_id: int | None, tenant: str) -> Iterator[None]:
        """A request refused before it is queued still takes its turn, failed: the SDK has counted
        it (its turn counter moves on whatever the answer), and every later request of the client
        would otherwise wait for it."""
        try:
            yield
        except REFUSALS as refusal:
            if seq_id is not None:
                self.turns.submit(model_id, seq_id, partial(_refused, refusal), owner=tenant)
            raise

    def _check_base(self, name: str | None) -> None:
        """``name`` (a client's ``base_model``) is this service's model: its config name, or the local
        folder it resolves to (what a client that loads the tokenizer from that folder names)."""
        if name is not None and name not in (self.base.name, self.base.tokenizer_id):
            raise RequestError(f"base model {name!r} is not served here; this service trains {self.base.name!r}")

    def info(self, model_id: str, tenant: str) -> types.GetInfoResponse:
        self.model_session(model_id, tenant)
        client = self.models.clients.get(model_id)
        return types.GetInfoResponse(
            model_id=model_id, is_lora=True, lora_rank=client.lora.rank if client else None,
            model_name=self.base.name, model_data=types.ModelData(arch=self.base.arch, model_name=self.base.name,
                                                                 tokenizer_id=self.base.tokenizer_id))

    def forward_backward(self, request: types.ForwardBackwardRequest, forward_only: bool, tenant: str,
                         fingerprint: str | None = None) -> str:
        model_id = request.model_id
        self.model_session(model_id, tenant)
        given = request.forward_backward_input
        with self._turn_taken_if_refused(model_id, request.seq_id, tenant):
            spec = LossSpec.parse(given.loss_fn, _numbers(given.loss_fn_config))
            if not given.data:
                raise RequestError("forward_backward needs at least one datum")
            rows = self.models.rows(given.data, spec)

        def run() -> ProtoResult:
            with self._training():
                outputs, metrics = self.models.forward_backward(model_id, rows, spec, backward=not forward_only)
            return ProtoResult(forward_backward_output(outputs, metrics))

        return self.turns.submit(model_id, request.seq_id, run, fingerprint, owner=tenant)

    @contextmanager
    def _training(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.training_s += time.perf_counter() - started

    def optim_step(self, request: types.OptimStepRequest, tenant: str, fingerprint: str | None = None) -> str:
        self.model_session(request.model_id, tenant)
        params = request.optim_params
        with self._turn_taken_if_refused(request.model_id, request.seq_id, tenant):
            if not isinstance(params, types.AdamParams):
                raise RequestError(f"optimizer {getattr(params, 'type', type(params).__name__)!r} is not served "
                                   f"here: adam_params only")
            adam_problem(params, self.models.max_learning_rate)
        def step() -> types.OptimStepResponse:
            with self._training():
                metrics = self.models.optim_step(request.model_id, params)
            if self.sampling is not None:  # one sample of the step time cost-aware activation plans with
                self.sampling.demand.stepped(self.training_s - self._trained_before_step)
            self._trained_before_step = self.training_s
            return types.OptimStepResponse(metrics=metrics)

        return self.turns.submit(request.model_id, request.seq_id, step, fingerprint, owner=tenant)

    def save_weights(self, request: types.SaveWeightsRequest, tenant: str, fingerprint: str | None = None) -> str:
        self.model_session(request.model_id, tenant)
        name = request.path or f"step-{time.strftime('%Y%m%d-%H%M%S')}"
        with self._turn_taken_if_refused(request.model_id, request.seq_id, tenant):
            path = self.checkpoints.path(request.model_id, "weights", name)
        folder = self.checkpoints.folder(tenant, path)

        def save() -> types.SaveWeightsResponse:
            if folder.exists() and not request.overwrite:
                raise RequestError(f"{path.uri} exists (save with overwrite=True to replace it)")
            self.models.save(request.model_id, folder, optimizer=True)
            return types.SaveWeightsResponse(path=path.uri)

        return self.turns.submit(request.model_id, request.seq_id, save, fingerprint, owner=tenant)

    def load_weights(self, request: types.LoadWeightsRequest, tenant: str, fingerprint: str | None = None
                     ) -> tuple[str, str]:
        """The request id and the model id it loads into: an existing client (``model_id``), or,
        the first request of a new one, ``{session_id}:train:{model_seq_id}`` (the id the SDK derives)."""
        if request.model_id is not None:
            model_id, seq_id = request.model_id, request.seq_id
            self.model_session(model_id, tenant)
            with self._turn_taken_if_refused(model_id, seq_id, tenant):
                path, folder = self.checkpoints.existing(tenant, request.path)
        else:
            path, folder = self.checkpoints.existing(tenant, request.path)
            if request.session_id is None or request.model_seq_id is None:
                raise RequestError("load_weights needs model_id, or session_id and model_seq_id")
            session = self.live_session(request.session_id, tenant)
            self._check_base(request.base_model)
            model_id, seq_id = f"{session.session_id}:train:{request.model_seq_id}", 0
            if model_id not in self.owner:
                self._admit_client(tenant)
                self.owner[model_id] = session.session_id
                session.models.append(model_id)

        def load() -> types.LoadWeightsResponse:
            self.models.load(model_id, folder, optimizer=request.optimizer)
            return types.LoadWeightsResponse(path=path.uri, model_id=model_id)

        return self.turns.submit(model_id, seq_id, load, fingerprint, owner=tenant), model_id

    # ------------------------------------------------------------------ sampling clients
    def _desk(self) -> SamplingDesk:
        if self.sampling is None:
            raise RequestError("this service trains only: it has no fleet to sample with")
        return self.sampling

    def save_for_sampler(self, request: types.SaveWeightsForSamplerRequest, tenant: str,
                         fingerprint: str | None = None) -> str:
        """A sampler of the client's adapter as it is after the requests before this one (published
        to the fleet), with a sampling session when ``sampling_session_seq_id`` is given, saved to a
        ``sampler_weights`` path when ``path`` is."""
        session_id = self.model_session(request.model_id, tenant)
        with self._turn_taken_if_refused(request.model_id, request.seq_id, tenant):
            desk = self._desk()
            path = self.checkpoints.path(request.model_id, "sampler_weights", request.path) if request.path else None

        def save() -> types.SaveWeightsForSamplerResponseInternal:
            if path is not None:
                self.models.save(request.model_id, self.checkpoints.folder(tenant, path), optimizer=False)
            sampler = desk.snapshot(request.model_id, path.uri if path else None)
            sampling_session = None
            if request.sampling_session_seq_id is not None:
                sampling_session = f"{session_id}:sample:{request.sampling_session_seq_id}"
                desk.open_session(session_id, sampling_session, sampler.name)
            return types.SaveWeightsForSamplerResponseInternal(path=path.uri if path else None,
                                                               sampling_session_id=sampling_session)

        return self.turns.submit(request.model_id, request.seq_id, save, fingerprint, owner=tenant)

    def create_sampling_session(self, request: types.CreateSamplingSessionRequest, tenant: str) -> tuple[str, str]:
        """The sampling session's id and the request id of making it (its sampler loaded and published
        when it names a saved path)."""
        session, desk = self.live_session(request.session_id, tenant), self._desk()
        sampling_session = f"{session.session_id}:sample:{request.sampling_session_seq_id}"
        if request.model_path is None:
            self._check_base(request.base_model)
            desk.open_session(session.session_id, sampling_session, BASE_SAMPLER)
            request_id = self.futures.create(tenant)
            self.futures.resolve(request_id, None)
            return sampling_session, request_id
        _, folder = self.checkpoints.existing(tenant, request.model_path)

        def load() -> None:
            sampler = desk.from_saved(request.model_path, folder)
            desk.open_session(session.session_id, sampling_session, sampler.name)

        return sampling_session, self.turns.submit(f"sampler:{sampling_session}", None, load, owner=tenant)

    def sampling_session(self, sampling_session: str | None, tenant: str) -> str:
        """``sampling_session``'s sampler, when it is ``tenant``'s; the same refusal as for an unknown one."""
        desk = self._desk()
        session_id, sampler = desk.sessions.get(sampling_session or "", ("", ""))
        if self._owned_session(session_id, tenant) is None:
            raise RequestError(f"no sampling session {sampling_session!r}: create one (create_sampling_client, "
                               f"save_weights_and_get_sampling_client) first")
        return sampler

    def sample(self, request: types.SampleRequest, tenant: str, fingerprint: str | None = None
               ) -> tuple[str, list[str]]:
        self.sampling_session(request.sampling_session_id, tenant)
        return self._desk().sample(request, tenant, fingerprint)

    def weights_info(self, uri: str, tenant: str) -> types.WeightsInfoResponse:
        path, folder = self.checkpoints.existing(tenant, uri)
        lora = self.models.saved_lora(folder)
        return types.WeightsInfoResponse(base_model=self.base.name, is_lora=True, lora_rank=lora.rank,
                                         train_unembed=lora.train_unembed, train_mlp=lora.train_mlp,
                                         train_attn=lora.train_attn)

    def training_run(self, run_id: str, tenant: str) -> types.TrainingRun:
        saves = self.checkpoints.of_run(tenant, run_id, "weights")
        owner = self.sessions.get(self.owner.get(run_id, ""))
        client = self.models.clients.get(run_id) if owner is not None and owner.tenant == tenant else None
        if client is None and not saves:
            raise KeyError(run_id)
        lora = client.lora if client else self.models.saved_lora(saves[-1])
        last = saves[-1] if saves else None
        return types.TrainingRun(
            training_run_id=run_id, base_model=self.base.name, model_owner="echo2", is_lora=True, lora_rank=lora.rank,
            last_request_time=_utc(self.last_request.get(run_id, last.stat().st_mtime if last else time.time())),
            last_checkpoint=types.Checkpoint(
                checkpoint_id=f"weights/{last.name}", checkpoint_type="training", time=_utc(last.stat().st_mtime),
                tinker_path=f"tinker://{run_id}/weights/{last.name}") if last else None)

    def view(self) -> ServiceView:
        """The sessions and training clients, for the live dashboard."""
        now, desk = time.monotonic(), self.sampling
        sampling = desk.sessions if desk is not None else {}
        sessions = [SessionRow(session_id=s.session_id, sdk_version=s.sdk_version, silent_s=now - s.last_seen,
                               training_clients=list(s.models),
                               sampling_sessions=sum(owner == s.session_id for owner, _ in list(sampling.values())))
                    for s in self.sessions.live()]
        clients = [TrainingClientRow(model_id=c.model_id, lora_rank=c.lora.rank, steps=c.steps)
                   for c in list(self.models.clients.values())]
        counts = desk.counts if desk is not None else DeskCounts()
        return ServiceView(sessions=sessions, training_clients=clients,
                           samplers=len(desk.samplers) - 1 if desk is not None else 0,
                           samples_waiting=len(desk.pending) if desk is not None else 0,
                           samples_returned=counts.returned, audited=counts.audited,
                           audits_failed=counts.audits_failed, samples_refused=counts.poisoned,
                           api_requests=self.api.requests,
                           api_s=self.api.seconds, training_s=self.training_s)

    def close(self) -> None:
        self._stop.set()
        self.turns.close()
        if self.sampling is not None:
            self.sampling.lane.close()


class ApiClock:
    """The API layer's own time: seconds spent handling requests (reading and checking a body,
    queueing its work, encoding an answer), less any long-poll's wait for a result. Counted on the
    event loop's thread only."""

    def __init__(self) -> None:
        self.requests, self.seconds = 0, 0.0

    def add(self, seconds: float) -> None:
        self.requests += 1
        self.seconds += seconds


def _refused(refusal: Exception) -> None:
    raise RequestError(str(refusal))


def _numbers(config: dict[str, float | str] | None) -> dict[str, float] | None:
    if config and (texts := [k for k, v in config.items() if isinstance(v, str)]):
        raise RequestError(f"loss_fn_config {texts} are text; the supported losses take numbers only")
    return config  # type: ignore[return-value]


def _utc(timestamp: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(timestamp, tz=timezone.utc)
