"""An ASGI app served by uvicorn in a background thread: the coordinator and every relay.

The socket is bound in the constructor, so ``port=0`` yields a known free port before the
server starts, and ``SO_REUSEADDR`` lets a resumed learner take its old port back at once.
Given a certificate and its key (PEM files, uvicorn's ``ssl_certfile``/``ssl_keyfile``), the
server speaks TLS and its :attr:`~BackgroundServer.url` is ``https://``; both files are loaded
in the constructor, so a wrong path or a key that does not match fails there, with the paths.
Every request head must arrive within ``head_timeout_s`` (:mod:`echo2.net.deadlines`), so a
slow-loris client is cut off instead of holding a connection for ever.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import uvicorn
from fastapi import FastAPI

from echo2.net.deadlines import with_head_timeout


class BackgroundServer:
    def __init__(self, app: FastAPI, host: str, port: int, *, what: str, advertise_host: str | None = None,
                 lifespan: str = "auto", graceful_s: float = 2.0, certfile: str | None = None,
                 keyfile: str | None = None, head_timeout_s: float = 10.0) -> None:
        """``what`` names the server in errors; ``advertise_host`` is the address others should
        dial when it differs from the bound one (e.g. bound to ``0.0.0.0``); ``certfile`` and
        ``keyfile`` (both or neither): serve TLS; ``head_timeout_s``: the deadline of each request head."""
        self.what, self.advertise_host = what, advertise_host
        if (certfile is None) != (keyfile is None):
            raise ValueError(f"the {what} needs both a TLS certificate and its key, or neither")
        if certfile is not None:
            try:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
            except (OSError, ssl.SSLError) as error:
                raise ValueError(f"the {what} cannot serve TLS with certificate {certfile} and key {keyfile}: "
                                 f"{error}") from None
        self.scheme = "https" if certfile else "http"
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan,
                                timeout_graceful_shutdown=graceful_s, ssl_certfile=certfile, ssl_keyfile=keyfile,
                                http=with_head_timeout(head_timeout_s))
        self._server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True,
                                        name=f"echo2-{what}-{self.port}")

    @property
    def url(self) -> str:
        host = self.advertise_host or ("127.0.0.1" if self.host in ("0.0.0.0", "") else self.host)
        return f"{self.scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._server.serve(sockets=[self._socket])

    def start(self, timeout_s: float) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise TimeoutError(f"the {self.what} did not start listening on {self.url} within {timeout_s:g}s")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 5.0, *, abort: bool = False) -> None:
        """Stop serving. ``abort=True`` cuts every open connection at once, as a crash would
        (clients see a reset, not a clean end): what the fault-tolerance tests use."""
        if abort and self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._abort_connections)
            except RuntimeError:  # the loop closed meanwhile
                pass
        self._server.force_exit = abort
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._socket.close()

    def _abort_connections(self) -> None:
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
