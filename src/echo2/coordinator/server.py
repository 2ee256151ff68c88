"""Run the coordinator's HTTP app on uvicorn in a background thread of the learner process."""

from __future__ import annotations

from fastapi import FastAPI

from echo2.net.serving import BackgroundServer


class CoordinatorServer(BackgroundServer):
    def __init__(self, app: FastAPI, host: str, port: int, *, certfile: str | None = None,
                 keyfile: str | None = None, head_timeout_s: float = 10.0) -> None:
        """``certfile``/``keyfile``: serve TLS (``coordinator.tls_certfile``/``tls_keyfile``);
        ``head_timeout_s``: ``limits.head_timeout_s``."""
        super().__init__(app, host, port, what="coordinator", certfile=certfile, keyfile=keyfile,
                         head_timeout_s=head_timeout_s)
