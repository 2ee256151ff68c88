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
from echo2.service.checkpoints import CheckpointStore
from echo2.service.futures import Futures
from echo2.service.sampling import SamplingDesk
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
    handed the service's futures and work queue; None: a service that trains only."""

    def __init__(self, base: BaseModelInfo, models: TrainingModels, checkpoints: CheckpointStore, *,
                 session_timeout_s: float, gap_timeout_s: float,
                 sampling: Callable[[Futures, Turns], SamplingDesk] | None = None) -> None:
        self.base, self.models, self.checkpoints = base, models, checkpoints
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
    def create_session(self, request: types.CreateSessionRequest) -> Session:
        session = self.sessions.create(request.tags, request.sdk_version)
        log.info("session %s opened (tinker SDK %s)", session.session_id, request.sdk_version)
        return session

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
            self.turns.submit("sampling", None, self.sampling.retire)

    def _release(self, session: Session, why: str) -> None:
        log.info("session %s ended (%s): releasing %d training client(s)", session.session_id, why, len(session.models))
        for model_id in list(session.models):
            self.unload(model_id)
        if self.sampling is not None:
            self.sampling.end_session(session.session_id)

    def unload(self, model_id: str) -> str:
        """Release one training client (its adapter and optimizer state; its saves stay): the request id."""
        session = self.sessions.get(self.owner.pop(model_id, ""))
        if session is not None and model_id in session.models:
            session.models.remove(model_id)
        self.turns.forget(model_id)

        def release() -> types.UnloadModelResponse:
            self.models.release(model_id)
            return types.UnloadModelResponse(model_id=model_id)

        return self.turns.submit(f"unload:{model_id}", None, release)

    def start_reaper(self, every_s: float = 5.0) -> None:
        """:meth:`reap` every ``every_s`` on a daemon thread, until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.reap()

        threading.Thread(target=loop, daemon=True, name="echo2-service-reaper").start()

    def live_session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(f"no live session {session_id!r} (finished, silent past "
                               f"{self.sessions.timeout_s:.0f}s, or never opened)")
        return session

    def model_session(self, model_id: str) -> str:
        """The live session owning ``model_id``; a clear error for an unknown or released one."""
        if model_id not in self.owner:
            raise RequestError(f"no training client {model_id!r} (released with its session, or never created)")
        self.last_request[model_id] = time.time()
        return self.owner[model_id]

    # ------------------------------------------------------------------ training clients
    def create_model(self, request: types.CreateModelRequest, fingerprint: str | None = None) -> str:
        session = self.live_session(request.session_id)
        self._check_base(request.base_model)
        if request.optimizer_config.type != "adamw":
            raise RequestError(f"optimizer {request.optimizer_config.type!r} is not served here: adamw only")
        model_id = f"{session.session_id}:train:{request.model_seq_id}"

        def create() -> types.CreateModelResponse:
            self.models.create(model_id, request.lora_config)
            return types.CreateModelResponse(model_id=model_id)

        request_id = self.turns.submit(model_id, 0, create, fingerprint)
        if model_id not in self.owner:
            self.owner[model_id] = session.session_id
            session.models.append(model_id)
        return request_id

    @contextmanager
    def _turn_taken_if_refused(self, model_id: str, seq_id: int | None) -> Iterator[None]:
        """A request refused before it is queued still takes its turn, failed: the SDK has counted
        it (its turn counter moves on whatever the answer), and every later request of the client
        would otherwise wait for it."""
        try:
            yield
        except REFUSALS as refusal:
            if seq_id is not None:
                self.turns.submit(model_id, seq_id, partial(_refused, refusal))
            raise

    def _check_base(self, name: str | None) -> None:
        """``name`` (a client's ``base_model``) is this service's model: its config name, or the local
        folder it resolves to (what a client that loads the tokenizer from that folder names)."""
        if name is not None and name not in (self.base.name, self.base.tokenizer_id):
            raise RequestError(f"base model {name!r} is not served here; this service trains {self.base.name!r}")

    def info(self, model_id: str) -> types.GetInfoResponse:
        self.model_session(model_id)
        client = self.models.clients.get(model_id)
        return types.GetInfoResponse(
            model_id=model_id, is_lora=True, lora_rank=client.lora.rank if client else None,
            model_name=self.base.name, model_data=types.ModelData(arch=self.base.arch, model_name=self.base.name,
                                                                 tokenizer_id=self.base.tokenizer_id))

    def forward_backward(self, request: types.ForwardBackwardRequest, forward_only: bool,
                         fingerprint: str | None = None) -> str:
        model_id = request.model_id
        self.model_session(model_id)
        given = request.forward_backward_input
        with self._turn_taken_if_refused(model_id, request.seq_id):
            spec = LossSpec.parse(given.loss_fn, _numbers(given.loss_fn_config))
            if not given.data:
                raise RequestError("forward_backward needs at least one datum")
            rows = self.models.rows(given.data, spec)

        def run() -> ProtoResult:
            with self._training():
                outputs, metrics = self.models.forward_backward(model_id, rows, spec, backward=not forward_only)
            return ProtoResult(forward_backward_output(outputs, metrics))

        return self.turns.submit(model_id, request.seq_id, run, fingerprint)

    @contextmanager
    def _training(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.training_s += time.perf_counter() - started

    def optim_step(self, request: types.OptimStepRequest, fingerprint: str | None = None) -> str:
        self.model_session(request.model_id)
        params = request.optim_params
        with self._turn_taken_if_refused(request.model_id, request.seq_id):
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

        return self.turns.submit(request.model_id, request.seq_id, step, fingerprint)

    def save_weights(self, request: types.SaveWeightsRequest, fingerprint: str | None = None) -> str:
        self.model_session(request.model_id)
        name = request.path or f"step-{time.strftime('%Y%m%d-%H%M%S')}"
        with self._turn_taken_if_refused(request.model_id, request.seq_id):
            path = self.checkpoints.path(request.model_id, "weights", name)
        folder = self.checkpoints.folder(path)

        def save() -> types.SaveWeightsResponse:
            if folder.exists() and not request.overwrite:
                raise RequestError(f"{path.uri} exists (save with overwrite=True to replace it)")
            self.models.save(request.model_id, folder, optimizer=True)
            return types.SaveWeightsResponse(path=path.uri)

        return self.turns.submit(request.model_id, request.seq_id, save, fingerprint)

    def load_weights(self, request: types.LoadWeightsRequest, fingerprint: str | None = None) -> tuple[str, str]:
        """The request id and the model id it loads into: an existing client (``model_id``), or,
        the first request of a new one, ``{session_id}:train:{model_seq_id}`` (the id the SDK derives)."""
        if request.model_id is not None:
            model_id, seq_id = request.model_id, request.seq_id
            self.model_session(model_id)
            with self._turn_taken_if_refused(model_id, seq_id):
                path, folder = self.checkpoints.existing(request.path)
        else:
            path, folder = self.checkpoints.existing(request.path)
            if request.session_id is None or request.model_seq_id is None:
                raise RequestError("load_weights needs model_id, or session_id and model_seq_id")
            session = self.live_session(request.session_id)
            self._check_base(request.base_model)
            model_id, seq_id = f"{session.session_id}:train:{request.model_seq_id}", 0
            if model_id not in self.owner:
                self.owner[model_id] = session.session_id
                session.models.append(model_id)

        def load() -> types.LoadWeightsResponse:
            self.models.load(model_id, folder, optimizer=request.optimizer)
            return types.LoadWeightsResponse(path=path.uri, model_id=model_id)

        return self.turns.submit(model_id, seq_id, load, fingerprint), model_id

    # ------------------------------------------------------------------ sampling clients
    def _desk(self) -> SamplingDesk:
        if self.sampling is None:
            raise RequestError("this service trains only: it has no fleet to sample with")
        return self.sampling

    def save_for_sampler(self, request: types.SaveWeightsForSamplerRequest, fingerprint: str | None = None) -> str:
        """A sampler of the client's adapter as it is after the requests before this one (published
        to the fleet), with a sampling session when ``sampling_session_seq_id`` is given, saved to a
        ``sampler_weights`` path when ``path`` is."""
        session_id = self.model_session(request.model_id)
        with self._turn_taken_if_refused(request.model_id, request.seq_id):
            desk = self._desk()
            path = self.checkpoints.path(request.model_id, "sampler_weights", request.path) if request.path else None

        def save() -> types.SaveWeightsForSamplerResponseInternal:
            if path is not None:
                self.models.save(request.model_id, self.checkpoints.folder(path), optimizer=False)
            sampler = desk.snapshot(request.model_id, path.uri if path else None)
            sampling_session = None
            if request.sampling_session_seq_id is not None:
                sampling_session = f"{session_id}:sample:{request.sampling_session_seq_id}"
                desk.open_session(session_id, sampling_session, sampler.name)
            return types.SaveWeightsForSamplerResponseInternal(path=path.uri if path else None,
                                                               sampling_session_id=sampling_session)

        return self.turns.submit(request.model_id, request.seq_id, save, fingerprint)

    def create_sampling_session(self, request: types.CreateSamplingSessionRequest) -> tuple[str, str]:
        """The sampling session's id and the request id of making it (its sampler loaded and published
        when it names a saved path)."""
        session, desk = self.live_session(request.session_id), self._desk()
        sampling_session = f"{session.session_id}:sample:{request.sampling_session_seq_id}"
        if request.model_path is None:
            self._check_base(request.base_model)
            desk.open_session(session.session_id, sampling_session, BASE_SAMPLER)
            request_id = self.futures.create()
            self.futures.resolve(request_id, None)
            return sampling_session, request_id
        _, folder = self.checkpoints.existing(request.model_path)

        def load() -> None:
            sampler = desk.from_saved(request.model_path, folder)
            desk.open_session(session.session_id, sampling_session, sampler.name)

        return sampling_session, self.turns.submit(f"sampler:{sampling_session}", None, load)

    def sample(self, request: types.SampleRequest, fingerprint: str | None = None) -> tuple[str, list[str]]:
        return self._desk().sample(request, fingerprint)

    def weights_info(self, uri: str) -> types.WeightsInfoResponse:
        path, folder = self.checkpoints.existing(uri)
        lora = self.models.saved_lora(folder)
        return types.WeightsInfoResponse(base_model=self.base.name, is_lora=True, lora_rank=lora.rank,
                                         train_unembed=lora.train_unembed, train_mlp=lora.train_mlp,
                                         train_attn=lora.train_attn)

    def training_run(self, run_id: str) -> types.TrainingRun:
        saves = self.checkpoints.of_run(run_id, "weights")
        client = self.models.clients.get(run_id)
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
        counts = desk.counts if desk is not None else {}
        return ServiceView(sessions=sessions, training_clients=clients,
                           samplers=len(desk.samplers) - 1 if desk is not None else 0,
                           samples_waiting=len(desk.pending) if desk is not None else 0,
                           samples_returned=counts.get("returned", 0), audited=counts.get("audited", 0),
                           audits_failed=counts.get("audits_failed", 0), samples_refused=counts.get("poisoned", 0),
                           api_requests=self.api.requests,
                           api_s=self.api.seconds, training_s=self.training_s)

    def close(self) -> None:
        self._stop.set()
        self.turns.close()


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
