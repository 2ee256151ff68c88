"""Run the coordinator's HTTP app on uvicorn in a background thread of the learner process."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI


class CoordinatorServer:
    """uvicorn on a pre-bound socket (so that ``port=0`` yields a known free port)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise TimeoutError(f"the coordinator did not start listening on {self.url} within {timeout_s:.0f}s")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._socket.close()
