"""Run the coordinator's HTTP app on uvicorn in a background thread of the learner process."""

from __future__ import annotations

from fastapi import FastAPI

from echo2.serving import BackgroundServer


class CoordinatorServer(BackgroundServer):
    def __init__(self, app: FastAPI, host: str, port: int, *, certfile: str | None = None,
                 keyfile: str | None = None) -> None:
        """``certfile``/``keyfile``: serve TLS (``coordinator.tls_certfile``/``tls_keyfile``)."""
        super().__init__(app, host, port, what="coordinator", certfile=certfile, keyfile=keyfile)
