"""A rollout worker's options as one typed object, and the worker built from it.

:class:`WorkerOptions` is the single source of a worker's configuration, however the worker is
started: ``echo2 worker`` parses its flags into one (:mod:`echo2.cli`), ``echo2 train`` builds
one per local worker from its config (:func:`echo2.launch.train.local_worker_options`) and hands
it to a local subprocess through the environment (:data:`OPTIONS_ENV`) or to a Ray actor as a
pickled object (:mod:`echo2.launch.ray_actors`); all of them end in :func:`build_worker`.

The run token is a :class:`pydantic.SecretStr` left out of ``repr``, ``model_dump`` and
``model_dump_json``: it leaves the object only through :meth:`WorkerOptions.secret_json` (the
environment of a local worker, readable only by its owner and root) and
:meth:`WorkerOptions.run_token`. It never goes on a command line, which every user of the
machine can read through ``ps``.

No torch at import (the CLI builds its parser from these fields): the worker is imported only
when one is built.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from echo2.units import mbps_to_bytes_per_s

if TYPE_CHECKING:
    import ssl

    from echo2.rollout.worker import RolloutWorker

#: Environment variable holding a worker's options as JSON, token included (set by the local
#: launcher; ``echo2 worker`` reads it when set, and flags given on its command line override it).
OPTIONS_ENV = "ECHO2_WORKER_OPTIONS"
#: Environment variable holding the run token (for workers started by hand: keeps it off ``ps``).
TOKEN_ENV = "ECHO2_TOKEN"
EXIT_TURNED_AWAY = 3
"""``echo2 worker``'s exit status when the coordinator turned it away (quarantined, or refused its
requests for good): a launcher must not start it again, or a quarantined worker would come back
under a new identity. Exit 1: it could not reach the coordinator; any other: it crashed."""


class WorkerOptions(BaseModel):
    """Everything a rollout worker is started with (``echo2 worker``'s flags, one field each)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    coordinator: str
    """Coordinator URL, e.g. http://10.0.0.5:8765."""
    token: SecretStr = Field(exclude=True, repr=False)
    """The run token (kept out of repr and dumps; see ``secret_json``)."""
    name: str | None = None
    """Name shown in metrics (default: host name)."""
    threads: int = Field(1, ge=1)
    """Torch threads."""
    device: str = "cpu"
    """hf engine device: cpu, cuda, cuda:N or auto."""
    give_up_after_s: float | None = Field(None, gt=0)
    """Seconds to keep retrying an unreachable coordinator before exiting; None: retry for ever
    with capped backoff, so that a worker comes back by itself after an outage of any length (a
    home link's, a partition's, a learner's restart)."""
    relay: bool = True
    """Serve the weight chunks this worker holds to its peers (off: a worker nobody can reach, e.g. behind NAT)."""
    relay_host: str = "127.0.0.1"
    """Interface this worker's chunk relay listens on (0.0.0.0 to serve remote peers)."""
    relay_port: int = Field(0, ge=0, le=65535)
    """Relay port (0: a free one)."""
    advertise_host: str | None = None
    """Address peers should use to reach the relay (default: the relay host)."""
    upload_mbps: float | None = Field(None, gt=0)
    """Cap the relay's upload, Mbit/s (bandwidth emulation; None: uncapped)."""
    latency_ms: float = Field(0.0, ge=0)
    """Delay every relay response by this many ms (WAN latency emulation)."""
    price_per_hour: float = Field(0.0, ge=0)
    """What this worker costs while active, $/h (cost-aware activation)."""
    worker_class: str = ""
    """Class name in the cost accounting (default: the worker's name)."""
    throughput_factor: float = Field(1.0, gt=0, le=1)
    """Emulate a slower device, in (0, 1]: a lease takes its generation's CPU time / factor."""
    ca_file: str | None = None
    """CA bundle (PEM) that https:// coordinators and relays must chain to (default: the system's)."""
    pin_sha256: tuple[str, ...] = ()
    """SHA-256 fingerprint(s) of the certificate https:// coordinators and relays must present,
    instead of a CA (self-signed setups; colons allowed)."""
    relay_certfile: str | None = None
    """Certificate (PEM) this worker's relay serves TLS with (with relay_keyfile; then its URL is https)."""
    relay_keyfile: str | None = None
    """Private key (PEM) of relay_certfile."""

    @field_validator("pin_sha256")
    @classmethod
    def _pins(cls, pins: tuple[str, ...]) -> tuple[str, ...]:
        from echo2.net.tls import normalize_pin

        return tuple(normalize_pin(pin) for pin in pins)

    @model_validator(mode="after")
    def _tls(self) -> WorkerOptions:
        if self.ca_file is not None and self.pin_sha256:
            raise ValueError("give ca_file or pin_sha256, not both")
        if (self.ca_file is not None or self.pin_sha256) and not self.coordinator.startswith("https://"):
            raise ValueError(f"ca_file/pin_sha256 verify a TLS coordinator, but {self.coordinator} is not https://")
        if (self.relay_certfile is None) != (self.relay_keyfile is None):
            raise ValueError("give relay_certfile and relay_keyfile together")
        return self

    def tls_verify(self) -> ssl.SSLContext | bool:
        """How this worker checks the coordinator's and its peers' certificates (httpx's ``verify``)."""
        from echo2.net.tls import client_context

        return client_context(self.ca_file, self.pin_sha256)

    def run_token(self) -> str:
        """The run token in clear."""
        return self.token.get_secret_value()

    def secret_json(self) -> str:
        """These options as JSON *with* the token in clear (for :data:`OPTIONS_ENV`; never log it)."""
        return json.dumps({**self.model_dump(mode="json"), "token": self.run_token()})

    @classmethod
    def from_secret_json(cls, text: str) -> WorkerOptions:
        """The inverse of :meth:`secret_json`."""
        return cls.model_validate_json(text)


def read_token_file(path: str | os.PathLike) -> str:
    """The run token kept in ``path``; refuses a file that other users could read or change
    (``chmod 600`` it), an empty one, and any OSError of reading it passes through."""
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise ValueError(f"{path} is accessible to other users (mode {stat.S_IMODE(mode):o}); "
                         f"it holds the run token, make it owner-only: chmod 600 {path}")
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"{path} is empty (expected the run token)")
    return token


def build_worker(options: WorkerOptions) -> RolloutWorker:
    """The rollout worker these options describe (not started: call its ``run``)."""
    from echo2.broadcast.relay import RelayOptions
    from echo2.net.guard import broadcast_credential
    from echo2.net.redact import redact_logs
    from echo2.rollout.worker import RolloutWorker  # torch: only when a worker is built

    # whatever this process logs from now on, the run's credentials come out as <redacted>
    redact_logs(options.run_token(), broadcast_credential(options.run_token()))
    relay = RelayOptions(
        bind_host=options.relay_host, port=options.relay_port, advertise_host=options.advertise_host,
        upload_bytes_per_s=mbps_to_bytes_per_s(options.upload_mbps), latency_s=options.latency_ms / 1000,
        certfile=options.relay_certfile, keyfile=options.relay_keyfile,
    ) if options.relay else None
    return RolloutWorker(options.coordinator, options.run_token(), name=options.name, threads=options.threads,
                         give_up_after_s=options.give_up_after_s, relay=relay, price_per_hour=options.price_per_hour,
                         worker_class=options.worker_class, throughput_factor=options.throughput_factor,
                         device=options.device, verify=options.tls_verify())
