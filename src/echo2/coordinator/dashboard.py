"""The live dashboard: ``GET /dashboard`` (a static page) and ``GET /v1/dashboard`` (its data).

Where the data comes from. The coordinator's own books for what lives there: the workers and
their states, the versions still spreading, the worker-hours and their dollars. The run
directory for the learner's side: ``metrics.jsonl``, ``timeline.jsonl`` and ``config.yaml``, which
the learner writes anyway, read incrementally by :class:`echo2.report.live.LiveRun` (learner
utilization, staleness of the trained groups, finished disseminations, held-out accuracy and
rewards, the learner's own cost). That directory is the only coupling to the learner: the
coordinator is told it (``create_app(..., run_dir=...)``); without it those sections are empty.

Credentials. The data route takes the run's viewer credential
(:func:`echo2.net.guard.viewer_credential`) or the run token, checked by the guard before the handler
runs (:mod:`echo2.coordinator.app`); a worker's session credential does not open it, and the
viewer credential opens nothing else. The page is open: it holds no data, and its script reads
the viewer credential from the URL's fragment (``/dashboard#token=...``, which browsers never send
to a server), then presents it in the ``X-Echo2-Token`` header of relative requests (so the page
works over the run's https as well as http). The data names no credential.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from echo2.coordinator.records import WorkerRecord
from echo2.coordinator.state import CoordinatorState
from echo2.report.data import RunData
from echo2.report.live import LiveRun

PAGE_PATH, DATA_PATH = "/dashboard", "/v1/dashboard"
#: The page may run its own inline script and style and ask its own origin, nothing else.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
}
#: A worker measured below this share of the active fleet's median throughput is shown as slow.
SLOW_FRACTION = 0.5
#: At most this many points per curve, versions in the dissemination table, bins of utilization.
MAX_POINTS, MAX_VERSIONS, UTILIZATION_BINS = 400, 40, 60
#: A refusal's reason is cut to this many characters (it may quote what the worker sent).
ERROR_CHARS = 200

WorkerState = Literal["active", "slow", "stale", "parked", "throttled", "quarantined", "left", "dead"]


class WorkerRow(BaseModel):
    name: str
    worker_id: str
    worker_class: str
    state: WorkerState = Field(description="quarantined, left, dead (no heartbeat), throttled (leases expired "
                                           "unfulfilled), parked (cost-aware "
                                           "activation), stale (generating with weights more than S versions "
                                           "old), slow (under half the active fleet's median), else active")
    version: int = Field(description="the version it last said it generates with")
    loaded_version: int
    rollouts_per_s: float | None = Field(description="moving average of measured rollouts/s")
    groups: int
    rejected: int
    price_per_hour: float
    seen_s_ago: float
    last_error: str = Field(description="why its latest refused request was refused ('' if none)")


class VersionRow(BaseModel):
    version: int
    published_at: float = Field(description="Unix time")
    spread_s: float | None = Field(description="publish until the last live worker held it; None while spreading")
    held_by: int | None = Field(description="live workers holding it now (versions the coordinator still tracks)")
    live: int | None


class Costs(BaseModel):
    worker_hours: float = Field(description="active (not parked) worker-hours so far")
    workers_usd: float
    by_class_usd: dict[str, float]
    learner_usd: float = Field(description="as of the learner's last step")
    total_usd: float
    centralized_usd: float | None = Field(description="the rollout hours at the learner's price, at its last step")


class SessionRow(BaseModel):
    session_id: str
    sdk_version: str
    silent_s: float = Field(description="since its last heartbeat or request")
    training_clients: list[str] = Field(description="model ids")
    sampling_sessions: int


class TrainingClientRow(BaseModel):
    model_id: str
    lora_rank: int
    steps: int = Field(description="optimizer steps applied")


class ServiceView(BaseModel):
    """A training service's clients (``echo2 serve``): what it serves beside the fleet's work."""

    sessions: list[SessionRow]
    training_clients: list[TrainingClientRow]
    samplers: int = Field(description="sampler adapters in the fleet's newest version")
    samples_waiting: int = Field(description="sampling requests no worker has answered yet")
    samples_returned: int
    audited: int
    audits_failed: int
    samples_refused: int = Field(0, description="requests refused after their leases failed on two workers")
    api_requests: int = Field(0, description="requests the Tinker routes handled")
    api_s: float = Field(0.0, description="seconds the routes spent handling them (long-poll waits excluded)")
    training_s: float = Field(0.0, description="seconds of forward-backward and optimizer steps")


class DashboardData(BaseModel):
    run: str
    time: float = Field(description="Unix time of this reading")
    version: int = Field(description="newest published version (= learner steps taken)")
    steps_total: int | None
    finished: bool
    learner_waiting: str | None = Field(description="why the learner is not training, while it waits for data")
    workers: list[WorkerRow]
    utilization: float | None = Field(description="learner busy / (busy + idle) so far")
    utilization_bins: list[float] = Field(description="busy share of equal time bins since the run started")
    bin_s: float
    staleness: list[tuple[int, int]] = Field(description="(versions behind, groups trained)")
    versions: list[VersionRow]
    reward: list[tuple[int, float]] = Field(description="(step, training reward mean)")
    accuracy: list[tuple[int, float]] = Field(description="(step, held-out greedy accuracy)")
    sampled_reward: list[tuple[int, float]] = Field(description="(step, held-out sampled reward)")
    samples_per_s: float | None
    costs: Costs
    service: ServiceView | None = Field(None, description="a training service's sessions and clients (echo2 serve)")


def _state(record: WorkerRecord, oldest_usable: int, median: float | None) -> WorkerState:
    if record.quarantined:
        return "quarantined"
    if record.left:
        return "left"
    if not record.alive:
        return "dead"
    if record.unfulfilled:
        return "throttled"
    if not record.active:
        return "parked"
    if record.version < oldest_usable:
        return "stale"
    if median is not None and record.throughput is not None and record.throughput < SLOW_FRACTION * median:
        return "slow"
    return "active"


def _workers(state: CoordinatorState) -> list[WorkerRow]:
    """The registry as rows (call under the state's lock)."""
    now, records = time.monotonic(), state.registry.records()
    measured = sorted(r.throughput for r in records if r.at_work and r.throughput)
    median = measured[len(measured) // 2] if len(measured) >= 2 else None
    return [WorkerRow(name=r.name, worker_id=r.worker_id, worker_class=r.worker_class,
                      state=_state(r, state.version - state.spec.staleness, median), version=r.version,
                      loaded_version=r.loaded_version, rollouts_per_s=r.throughput, groups=r.groups,
                      rejected=r.rejected, price_per_hour=r.price_per_hour, seen_s_ago=now - r.last_seen,
                      last_error=r.last_error[:ERROR_CHARS]) for r in records]


def _versions(state: CoordinatorState, learner: RunData | None) -> list[VersionRow]:
    """Finished disseminations (the learner's timeline) and the versions the coordinator still
    tracks, with how many live workers hold them (call under the state's lock)."""
    rows = {i["version"]: VersionRow(version=i["version"], published_at=i["start"], spread_s=i["end"] - i["start"],
                                     held_by=None, live=None)
            for i in (learner.disseminated if learner is not None else [])}
    held = [r.loaded_version for r in state.registry.live()]
    for version, published_at in state.versions.published_at.items():
        done = rows.get(version)
        rows[version] = VersionRow(version=version, published_at=published_at, spread_s=done.spread_s if done else None,
                                   held_by=sum(v >= version for v in held), live=len(held))
    return [rows[v] for v in sorted(rows)[-MAX_VERSIONS:]]


def _thin(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most :data:`MAX_POINTS` of ``points``, evenly spaced, the last one kept."""
    if len(points) <= MAX_POINTS:
        return points
    stride = -(-len(points) // MAX_POINTS)
    return points[::stride][: MAX_POINTS - 1] + [points[-1]]


def collect(state: CoordinatorState, run: LiveRun | None, service: Callable[[], ServiceView] | None = None
            ) -> DashboardData:
    """One reading of the run: the coordinator's books under its lock, the learner's files outside
    it, and a training service's clients (``service``) when it serves some."""
    learner = run.read() if run is not None else None
    with state.cond:
        workers, versions = _workers(state), _versions(state, learner)
        worker_hours, by_class = state.fleet.spent()
        version, finished, waiting = state.version, state.finished, state.data_wait()
    steps = learner.steps if learner is not None else []
    evals = learner.evals if learner is not None else []
    bin_s, shares = learner.busy_shares(UTILIZATION_BINS) if learner is not None else (0.0, [])
    last = steps[-1] if steps else {}
    workers_usd, learner_usd = sum(by_class.values()), last.get("cost_learner_usd", 0.0)
    return DashboardData(
        run=run.run_dir.name if run is not None else "", time=time.time(), version=version,
        steps_total=run.steps_total if run is not None else None, finished=finished, learner_waiting=waiting,
        workers=workers,
        utilization=last.get("utilization"), utilization_bins=shares, bin_s=bin_s,
        staleness=list(learner.staleness_counts().items()) if learner is not None else [], versions=versions,
        reward=_thin([(r["version"], r["reward_mean"]) for r in steps if "reward_mean" in r]),
        accuracy=_thin([(r["version"], r["eval_accuracy"]) for r in evals]),
        sampled_reward=_thin([(r["version"], r["eval_sampled_reward"]) for r in evals if "eval_sampled_reward" in r]),
        samples_per_s=last.get("samples_per_s"),
        costs=Costs(worker_hours=worker_hours, workers_usd=workers_usd, by_class_usd=by_class, learner_usd=learner_usd,
                    total_usd=workers_usd + learner_usd, centralized_usd=last.get("cost_centralized_usd") or None),
        service=service() if service is not None else None,
    )


def mount(app: FastAPI, state: CoordinatorState, run_dir: Path | None,
          service: Callable[[], ServiceView] | None = None) -> None:
    """Add the page and its data route to ``app`` (the guard in front decides who may read the data);
    ``service``: a training service's view of its clients."""
    run = LiveRun(run_dir) if run_dir is not None else None
    page = (files("echo2") / "assets" / "dashboard.html").read_text(encoding="utf-8")

    @app.get(PAGE_PATH, include_in_schema=False)
    def dashboard_page() -> HTMLResponse:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    @app.get(DATA_PATH)
    def dashboard_data(response: Response) -> DashboardData:
        response.headers["Cache-Control"] = "no-store"
        return collect(state, run, service)
