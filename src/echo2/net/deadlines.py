"""A deadline on every request head: what closes slow-loris connections.

uvicorn (h11) arms a timer only between requests (``timeout_keep_alive``); a client that opens a
connection and sends its request head one byte at a time holds a connection, a file descriptor
and a parser forever. :class:`HeadDeadlineProtocol` arms a timer when a connection opens and
after each response: a complete request head (request line and every header) must arrive within
``head_timeout_s``, else the server answers ``408 Request Timeout`` and closes the connection.
The body's deadline is :class:`echo2.net.guard.Guard`'s job (it knows when the body starts).
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_BODY = json.dumps({"detail": "request head not received in time", "code": "timeout"}).encode()
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                     b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY)


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (see the module's docstring)."""

    head_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_deadline_passed)

    def _disarm_head_deadline(self) -> None:
        if getattr(self, "_head_deadline", None) is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_deadline_passed(self) -> None:
        self._head_deadline = None
        waiting_for_head = self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
        if waiting_for_head and not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()


def with_head_timeout(head_timeout_s: float) -> type[HeadDeadlineProtocol]:
    """The protocol class uvicorn should instantiate (``uvicorn.Config(http=...)``) for this deadline."""
    if not head_timeout_s > 0:
        raise ValueError(f"head_timeout_s must be > 0, got {head_timeout_s}")
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"head_timeout_s": float(head_timeout_s)})
