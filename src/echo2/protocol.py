"""Wire types shared by the coordinator and the workers (pydantic; the HTTP API's schema).

Every request a worker sends is validated against these models on arrival; anything that does
not fit is refused with a 4xx and a reason before it can touch the run's state.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: Header carrying the run token (register), the worker's session credential (later calls) or,
#: to relays and the learner's chunk server, the broadcast credential (:mod:`echo2.net.guard`).
AUTH_HEADER = "X-Echo2-Token"
LEARNER_SOURCE = "learner"
"""Stands for the coordinator's own chunk server in :attr:`VersionInfo.sources` (no worker's name)."""
MIN_LOGPROB = -50.0
"""The lowest behaviour log-prob a submission may carry. A sampler draws a token of probability
e^-50 (2e-22) about never — over a 49k vocabulary less than once in 10^17 draws — while one
log-prob of -1000 from an untrusted worker made ``exp(logprob - behaviour)`` overflow and the
learner's gradient NaN (docs/security.md)."""
MAX_UPLOAD_BYTES_PER_S = 1e12
"""The highest relay upload rate a worker may declare or report: 8 Tb/s, past any network card. An
unbounded finite rate (1e300) would make every sum of rates in the relay plan infinite."""

#: A relay URL: scheme, host and port, nothing else (no user, path, query or fragment).
_RELAY_URL = re.compile(r"https?://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?):([0-9]{1,5})")


def relay_url_problem(url: str) -> str | None:
    """Why ``url`` is not a relay URL peers may be sent to (``http(s)://host:port``), or None."""
    match = _RELAY_URL.fullmatch(url)
    if match is None or not 0 < int(match.group(1)) < 65536:
        return (f"relay_url must be http(s)://host:port with a port in 1-65535 and no user, path, query "
                f"or fragment, not {url[:80]!r}")
    return None


WORKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,63}")
"""What a worker may call itself (or its cost class): it is printed in logs, metrics keys, the
dashboard and file names, so no spaces, newlines or markup (a newline in a name forged log lines)."""


def worker_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a worker's name or class, or None ("" lets the coordinator choose)."""
    if name and WORKER_NAME.fullmatch(name) is None:
        return (f"a worker name is 1-64 letters, digits and . _ @ : + - starting with a letter or digit, "
                f"not {name[:80]!r}")
    if name == LEARNER_SOURCE:
        return f"{LEARNER_SOURCE!r} is the learner's own name"
    return None


class Message(BaseModel):
    """Every wire message: no unknown field, no NaN or +-inf in a float (one infinite timeline time
    made the dashboard fail and the run directory unreadable for good), and strict types: a number
    sent as a string (``"version": "7"``), a bool as a number or a number as a bool is refused with
    the field's name rather than guessed at (pydantic's lax mode took ``true`` for version 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class RegisterRequest(Message):
    name: str = Field(max_length=64)
    """Human-readable worker name (host, device): :data:`WORKER_NAME`; "" = the worker id. A name
    a live worker already has gets a ``#N`` suffix."""
    relay_url: str | None = Field(None, max_length=256)
    """Where this worker serves weight chunks to peers, ``http(s)://host:port``; None = not
    reachable (a leaf)."""
    upload_bytes_per_s: float | None = Field(None, gt=0, le=MAX_UPLOAD_BYTES_PER_S)
    """Declared upload bandwidth of the relay (orders the broadcast plan; None = unknown)."""
    price_per_hour: float = Field(0.0, ge=0, le=1e4)
    """What this worker costs while active, dollars per hour (drives cost-aware activation)."""
    worker_class: str = Field("", max_length=64)
    """Class for cost accounting (e.g. ``rtx4090-spot``); default: the worker's name."""

    @field_validator("relay_url")
    @classmethod
    def _plain_relay_url(cls, value: str | None) -> str | None:
        if value is not None and (problem := relay_url_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("name", "worker_class")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if (problem := worker_name_problem(value)) is not None:
            raise ValueError(problem)
        return value


class AdapterSpec(Message):
    """Shape of the LoRA adapter a run trains; workers wrap their base model in the same one."""

    r: int = Field(ge=1)
    alpha: float = Field(gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(min_length=1)


class RunSpec(Message):
    """What a worker needs to know to produce useful groups for this run."""

    model: str
    dtype: str
    group_size: int
    temperature: float
    max_new_tokens: int
    groups_per_lease: int
    protocol: Literal["sync", "pull", "async"]
    staleness: int
    fetch_delay_s: float
    broadcast_stall_s: float
    broadcast_timeout_s: float
    heartbeat_interval_s: float
    seed: int
    engine: str = "hf"
    """Rollout engine (:mod:`echo2.rollout.engines`): ``hf`` (portable default), ``vllm`` (GPU), or
    ``module:Class`` (the run's own, importable on the worker)."""
    adapter: AdapterSpec | None = None
    """LoRA runs: versions carry only this adapter, applied to the worker's own copy of ``model``."""
    max_turns: int = Field(1, ge=1)
    """Model turns per episode (the task's); above 1 the worker asks ``/v1/respond`` between turns."""
    swap_between_turns: bool = True
    """Async runs: a worker may load newer weights between two turns of an episode."""
    swap_between_steps: bool = False
    """Async runs: a worker applies newer weights between two decoding steps (in-flight updates)."""
    size_leases_to_device: bool = False
    """A worker asks for as many groups per lease as its device holds (up to ``groups_per_lease``,
    then the whole staleness window): :mod:`echo2.core.lease_sizing`."""
    sampler_bundles: bool = False
    """A training service's fleet (``echo2 serve``): each version is a bundle of the clients'
    sampler adapters (:mod:`echo2.broadcast.bundle`) and leases carry sampling requests."""
    max_lora_rank: int | None = None
    """A training service's fleet: the largest rank a sampler of its bundles may have (an engine
    that serves adapters sizes itself by it)."""
    agent_calls: bool = False
    """An agent run (``task.name=agent:...``): leases carry the agents' model calls
    (:mod:`echo2.gateway`), sampled with the run's own weights (the sampler ``""``)."""
    check_draws: bool = True
    """Audits check that each token is the one the lease's draws pick (:mod:`echo2.model.draws`):
    an engine that cannot draw by that rule refuses to start."""

    @property
    def serves_requests(self) -> bool:
        """Whether leases carry sampling requests (a service's clients', an agent's calls), not prompts."""
        return self.sampler_bundles or self.agent_calls


class RegisterResponse(Message):
    worker_id: str
    session_token: str
    spec: RunSpec
    broadcast_token: str
    """The credential to present to relays and the learner's chunk server: it opens chunk
    downloads and nothing else (the run token and the session credential never go to a relay)."""


class TimelineEvent(Message):
    """An interval a worker spent on something, for the run's timeline plot."""

    kind: Literal["generate", "fetch"]
    start: float
    end: float
    version: int = Field(ge=0)
    delta: bool = False
    """A fetch that rebuilt the version from its delta (``broadcast.encoding: delta``)."""

    @model_validator(mode="after")
    def _ordered(self) -> TimelineEvent:
        if self.end < self.start:
            raise ValueError(f"an event ends ({self.end}) before it starts ({self.start})")
        return self


class SlowSource(Message):
    """A relay this worker left because it sent below its floor (:func:`echo2.core.fetch_chain.too_slow`)."""

    url: str = Field(max_length=300)
    bytes_per_s: float = Field(ge=0, le=MAX_UPLOAD_BYTES_PER_S)
    """The rate it measured from it."""


class Heartbeat(Message):
    version: int = Field(ge=0)
    events: list[TimelineEvent] = Field(default_factory=list, max_length=1000)
    upload_bytes_per_s: float | None = Field(None, gt=0, le=MAX_UPLOAD_BYTES_PER_S)
    """Upload rate this worker's relay achieved so far (measured; orders the relay plan)."""
    slow_sources: list[SlowSource] = Field(default_factory=list, max_length=16)
    """Relays of its chain it left for their rate since its last heartbeat: the coordinator takes
    them out of the relay plan a while (a peer's measurement beats a relay's word on itself)."""


class HeartbeatResponse(Message):
    latest_version: int
    stop: bool


class LeaseRequest(Message):
    version: int = Field(ge=0)
    """The policy version the worker holds and will generate with."""
    max_groups: int = Field(ge=1, le=4096)


class LeasedPrompt(Message):
    """A prompt to sample a group for. Never its reference answer: rewards are computed by the
    coordinator (:mod:`echo2.coordinator.scoring`), so a worker has nothing to score with."""

    slot: int
    prompt: str


MAX_STOP_STRINGS = 16
"""Stop texts one sampling request may give (each is searched for in the decoded text at every token)."""
MAX_STOP_CHARS = 1024
"""The longest stop text."""
MAX_SEED = 2**63 - 1
"""The largest seed a request may give: a signed 64-bit integer (a larger one overflowed
``torch.Generator.manual_seed`` and took the worker with it)."""
MAX_TEMPERATURE = 100.0
"""The highest sampling temperature (past it every distribution is uniform to float precision)."""


class LeasedSample(Message):
    """A training service client's sampling request (``asample``), or an agent's call: ``num_samples``
    completions of ``prompt_ids`` from the sampler adapter ``sampler`` (in the bundle of the lease's
    version). Built by the service and the gateway through :func:`leased_sample`, so that a
    client's value no worker can take is a clear refusal at the door, never a worker's crash."""

    slot: int
    sampler: str = Field(max_length=128)
    """The bundle's name for the adapter ("" for the base model itself)."""
    prompt_ids: list[int] = Field(min_length=1)
    num_samples: int = Field(ge=1, le=1024)
    max_tokens: int = Field(ge=1)
    temperature: float = Field(gt=0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop_ids: list[int] | None = Field(None, max_length=MAX_STOP_STRINGS)
    """Token ids that end a completion (kept in it); None: the model's end-of-sequence token."""
    stop_strings: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] = Field(
        default_factory=list, max_length=MAX_STOP_STRINGS)
    """Texts that end a completion once its decoded text contains one (the token completing it kept)."""
    prompt_logprobs: bool = False
    """Also the log-prob of each prompt token after the first."""


def leased_sample(**fields: object) -> LeasedSample:
    """A :class:`LeasedSample` of ``fields``, or a ValueError naming the first field out of bounds
    and its bounds, in words a client can act on (the service and the gateway answer it with 400)."""
    try:
        return LeasedSample(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"] if not isinstance(part, int)) or "request"
        raise ValueError(f"{where}: {first['msg']}") from None


class LeaseResponse(Message):
    status: Literal["granted", "wait", "refresh", "parked", "stop"]
    """``granted``: work to do; ``wait``: the staleness window is full, ask again;
    ``refresh``: your weights are too old for the next slot, fetch ``latest_version`` first;
    ``parked``: the fleet has enough cheaper capacity, ask again later; ``stop``: the run is over."""
    latest_version: int
    lease_id: str | None = None
    version: int | None = None
    deadline_s: float | None = None
    prompts: list[LeasedPrompt] = Field(default_factory=list)
    samples: list[LeasedSample] = Field(default_factory=list)
    """A training service's sampling requests (a lease carries prompts or samples, never both)."""
    draw_seed: int | None = Field(None, ge=0, le=MAX_SEED)
    """The randomness of a granted lease, fixed by the coordinator (:mod:`echo2.model.draws`): every
    token is drawn from it by the verifiable rule, the row of a group's completion ``i`` being
    ``row_key(slot, i)`` (a sampling request with a ``seed`` of its own draws from that instead)."""
    retry_after_s: float | None = None
    """``wait`` or ``parked`` answered at once rather than held open (a long-poll): ask again after
    this long (a parked worker, one on probation with its one lease out, a second request of one
    worker, or the coordinator's long-polls all taken)."""


def behaviour_logprobs(values: list[float]) -> list[float]:
    """``values`` if they can be a sampler's log-probs of the tokens it drew (finite, <= 0, none
    below :data:`MIN_LOGPROB`); else the ValueError saying why."""
    if any(not math.isfinite(v) or v > 1e-4 for v in values):
        raise ValueError("log-probs must be finite and <= 0")
    lowest = min(values)
    if lowest < MIN_LOGPROB:
        raise ValueError(f"log-prob {lowest:g} is below {MIN_LOGPROB:g}: no sampler draws a token that unlikely")
    return values


class Switch(Message):
    """In-flight updates: from token ``at`` on, a completion's tokens came from ``version``'s logits."""

    at: int = Field(ge=1)
    version: int = Field(ge=0)


class Completion(Message):
    """A sampled completion (or a whole episode) and the behaviour log-prob of each token. No
    reward: the coordinator scores the tokens itself; a field the protocol does not name is refused."""

    token_ids: list[int] = Field(min_length=1)
    logprobs: list[float] = Field(min_length=1)
    mask: list[int] | None = None
    """Episodes (:mod:`echo2.model.episodes`): 1 at each token the model sampled, 0 at the tokens the
    environment inserted (log-prob 0, unused); None: every token is the model's."""
    turn_versions: list[int] | None = Field(None, max_length=256)
    """Episodes: the policy version that sampled each model turn, in order."""
    switches: list[Switch] | None = Field(None, max_length=256)
    """In-flight updates (``rollout.swap_between_steps``): where a newer version's weights took over
    within a model turn, in order; None: none did."""

    @field_validator("logprobs")
    @classmethod
    def _finite_logprobs(cls, values: list[float]) -> list[float]:
        return behaviour_logprobs(values)

    @model_validator(mode="after")
    def _episode_shape(self) -> Completion:
        if self.mask is not None:
            if len(self.mask) != len(self.token_ids) or not set(self.mask) <= {0, 1} or self.mask[0] != 1:
                raise ValueError("mask must give 0 or 1 for every token and start with a model token (1)")
        if self.turn_versions is not None and any(b < a for a, b in zip(self.turn_versions, self.turn_versions[1:])):
            raise ValueError("turn_versions must not decrease")
        if self.switches:
            indices, versions = [switch.at for switch in self.switches], [switch.version for switch in self.switches]
            if indices[-1] >= len(self.token_ids) or any(b <= a for a, b in zip(indices, indices[1:])):
                raise ValueError("switches must name tokens after the first, in increasing order")
            if any(b <= a for a, b in zip(versions, versions[1:])):
                raise ValueError("switches' versions must increase")
            if self.mask is not None and any(self.mask[index] != 1 for index in indices):
                raise ValueError("a switch must fall on a model token (mask 1)")
        return self


class GroupResult(Message):
    slot: int
    completions: list[Completion]


class SampledSequence(Message):
    """One completion of a sampling request: its tokens, the behaviour log-prob of each, and why it stopped."""

    token_ids: list[int] = Field(min_length=1)
    logprobs: list[float] = Field(min_length=1)
    stop_reason: Literal["stop", "length"]

    @field_validator("logprobs")
    @classmethod
    def _finite_logprobs(cls, values: list[float]) -> list[float]:
        return behaviour_logprobs(values)


class SampleResult(Message):
    slot: int
    sequences: list[SampledSequence] = Field(min_length=1)
    prompt_logprobs: list[float] | None = None
    """One per prompt token after the first, when the request asked for them."""

    @field_validator("prompt_logprobs")
    @classmethod
    def _finite_prompt_logprobs(cls, values: list[float] | None) -> list[float] | None:
        """The same bounds as a sampled token's: a client may be handed them (-1e308 had passed a
        finite-only check, to be returned unaudited once the worker's audit rate had decayed)."""
        return behaviour_logprobs(values) if values else values


class SubmitRequest(Message):
    lease_id: str
    version: int = Field(ge=0)
    groups: list[GroupResult] = Field(default_factory=list)
    samples: list[SampleResult] = Field(default_factory=list)
    """A sampling lease's results (:class:`LeasedSample`), instead of ``groups``."""
    generate_seconds: float = Field(ge=0)
    events: list[TimelineEvent] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _one_kind(self) -> SubmitRequest:
        if bool(self.groups) == bool(self.samples):
            raise ValueError("a submission carries groups (a task's lease) or samples (a sampling lease), one of them")
        return self


class LeaseFailure(Message):
    """A lease its worker could not carry out, handed back at once with the reason (an engine that
    raised on one request, say): its work goes to another worker (a sampling request that failed
    on two is refused to its client instead, :data:`echo2.core.sample_queue.POISON_AFTER`)."""

    lease_id: str
    reason: str = Field(max_length=2000)


class RespondItem(Message):
    slot: int
    replies: list[Annotated[str, Field(max_length=65536)]] = Field(min_length=1, max_length=256)
    """The model's replies in this episode so far, decoded (the last one is new)."""


class RespondRequest(Message):
    """Between two turns: the environment's answers for the episodes of a lease still playing."""

    lease_id: str
    items: list[RespondItem] = Field(min_length=1, max_length=65536)


class RespondResponse(Message):
    observations: list[str | None]
    """Per item: the text to insert before the model's next turn, or None: the episode is over."""


class SubmitResponse(Message):
    accepted: int
    duplicate: bool = False




class DeltaStep(Message):
    """One kept version and its delta from the version before it (see ``VersionInfo.catch_up``)."""

    version: int
    sha256: str
    delta_sha256: str
    delta_bytes: int


class VersionInfo(Message):
    version: int
    sha256: str
    """Hash of the whole payload; a worker loads only bytes that match it."""
    size_bytes: int
    delta_sha256: str | None = None
    """Hash of this version's delta from the previous one (``broadcast.encoding: delta``; None: no
    delta). A worker holding the previous version may fetch and apply it instead; the result must
    still hash to ``sha256``."""
    delta_bytes: int | None = None
    catch_up: list[DeltaStep] = Field(default_factory=list)
    """The versions the coordinator still keeps before this one that have deltas, oldest first. A
    worker some versions behind may rebuild this one from the version it holds by applying their
    deltas in turn, when together they are smaller than the version; otherwise one version skipped
    would make every later fetch a full one on a link that carries a full version more slowly than
    versions come (each result is checked against these hashes, the last against ``sha256``)."""
    sources: list[str] = Field(default_factory=list)
    """Where the asking worker should fetch this version's chunks: parent relay URL first, then
    the fallback chain, ending with ``"learner"`` (the coordinator itself)."""
    source_rates: dict[str, float] = Field(default_factory=dict)
    """Relay URL of ``sources`` -> the upload rate (bytes/s) the coordinator plans it at: what it
    declared or measured of itself, or less where a peer measured less. A worker leaves a relay that
    sends well below it (:func:`echo2.core.fetch_chain.rate_floor`)."""
