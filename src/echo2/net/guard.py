"""The door of every echo2 HTTP server: credentials checked before a body byte is read, bodies
capped while they stream, and the per-run broadcast credential.

:class:`Guard` is a pure ASGI middleware (no ``BaseHTTPMiddleware``, which reads nothing itself
but lets the app read first). For each HTTP request it

1. asks ``authorize(path, credential, client_host)`` (the credential is the ``X-Echo2-Token``
   header) and, on a refusal, answers at once (401 with a reason, or 429 with ``Retry-After``)
   without calling the app: an anonymous client cannot make the server read, parse or validate
   a single byte of its body;
2. answers 413 at once when ``Content-Length`` announces more than ``max_body_bytes``;
3. counts the body as the app reads it (chunked or not, announced or not) and, as soon as it
   passes ``max_body_bytes``, answers 413 and stops reading;
4. gives the whole body ``body_timeout_s`` from the request's head: a client that dribbles its
   body (slow loris) is answered 408 and cut off. The head's own deadline is
   :mod:`echo2.net.deadlines`' job.

Refusals carry ``Connection: close``: the server closes the connection instead of draining
the rest of a body it will never use.

The broadcast credential (:func:`broadcast_credential`) is what peers present to relays and to
the learner's chunk server: derived from the run token, handed to workers at registration, it
lets its holder download weight chunks and nothing else. The run token and the session
credentials never leave for a relay, so a worker that registers a relay URL pointing at its own
server collects nothing it could use against the coordinator.
The viewer credential (:func:`viewer_credential`), derived the same way, is what the live
dashboard's page presents: it reads the run's dashboard data and nothing else.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from echo2.protocol import AUTH_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_AUTH_HEADER = AUTH_HEADER.lower().encode("latin-1")


#: Seconds a 429 is held before it is sent. A refusal answered at once lets a client that ignores
#: ``Retry-After`` send as fast as the server answers: 100 concurrent lease requests from one
#: worker were refused ~600 times a second, and parsing them alone cost the learner's process a
#: third of its steps. Held, each of its connections gets one answer a second, and a waiting
#: answer costs the server a timer, not a thread; an honest client waits out ``Retry-After`` anyway.
TARPIT_S = 1.0


class Refusal(NamedTuple):
    status: int
    detail: str
    code: str
    retry_after_s: float | None = None
    hold_s: float | None = None
    """Seconds the guard holds the refusal before it answers; None: :data:`TARPIT_S` for a 429, else none."""


class Tarpit:
    """Holds one caller's refusals long enough that it is answered at most ``per_s`` refusals a
    second however many connections it keeps open: each is held ``(n + 1) / per_s`` seconds, ``n``
    being that caller's refusals still held (at least :data:`TARPIT_S`, at most ``most_s``).

    Why: a fixed one-second hold answers a caller with 100 connections 100 times a second, and
    100 calls at once on one episode key, each refused, parsed and re-sent, cost the learner's
    process (its coordinator on the same cores) over 40% of its steps. Held by the caller's own
    count, a flood goes at ``per_s`` whatever its width, and an honest agent's one call over its
    limit waits the usual second. Touched on the event loop only."""

    def __init__(self, per_s: float = 4.0, most_s: float = 30.0) -> None:
        self.per_s, self.most_s = per_s, most_s
        self._held: dict[str, int] = {}

    def hold_s(self, caller: str) -> float:
        """Seconds to hold this refusal of ``caller`` (counted as held for that long)."""
        held = self._held.get(caller, 0)
        seconds = min(self.most_s, max(TARPIT_S, (held + 1) / self.per_s))
        self._held[caller] = held + 1
        asyncio.get_running_loop().call_later(seconds, self._release, caller)
        return seconds

    def _release(self, caller: str) -> None:
        left = self._held.pop(caller, 1) - 1
        if left > 0:
            self._held[caller] = left


#: ``authorize(path, credential, client_host)``: None lets the request in, a :class:`Refusal` answers it.
Authorize = Callable[[str, "str | None", str], "Refusal | None"]


@dataclass(frozen=True)
class Door:
    """The routes under a path prefix that take a credential of their own (a training service's API
    key, an agent's episode key), checked by ``check(path, headers)`` (lower-case header names) before
    a body byte is read, their bodies capped at ``max_body_bytes``: a caller with a forged key had
    a 15 MB chat body parsed, 2.8 GB of the learner's process, before its 401."""

    check: Callable[[str, Mapping[str, str]], "Refusal | None"]
    max_body_bytes: int


def broadcast_credential(run_token: str) -> str:
    """The run's broadcast credential: ``HMAC-SHA256(run_token, "echo2-broadcast")`` in hex.
    It opens the chunk routes (``/v1/broadcast``) and nothing else."""
    return hmac.new(run_token.encode(), b"echo2-broadcast", hashlib.sha256).hexdigest()


def viewer_credential(run_token: str) -> str:
    """The run's read-only viewer credential: ``HMAC-SHA256(run_token, "echo2 dashboard")`` in hex.
    It opens the dashboard's data (``/v1/dashboard``) and nothing else: whoever watches a run
    cannot register, lease, submit or download weights with it, nor recover the run token."""
    return hmac.new(run_token.encode(), b"echo2 dashboard", hashlib.sha256).hexdigest()


def same_secret(presented: str | None, expected: str | None) -> bool:
    """``presented == expected`` in constant time (False when either is missing)."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def unauthorized(what: str) -> Refusal:
    return Refusal(401, f"wrong or missing {what} in the {AUTH_HEADER} header", "unauthorized")


class _Cut(Exception):
    """The body passed the size limit or its deadline while the app was reading it (the 413 or
    408 is already sent)."""


class Guard:
    """``app`` behind credential checks and a streaming body cap (see the module's docstring)."""

    def __init__(self, app: Callable, *, authorize: Authorize, max_body_bytes: int, body_timeout_s: float = 60.0,
                 doors: Mapping[str, Door] | None = None) -> None:
        self.app, self.authorize, self.max_body_bytes = app, authorize, max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.doors = dict(doors or {})
        """Path prefix -> the :class:`Door` of the routes under it (checked instead of ``authorize``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        credential, length = None, None
        for name, value in scope.get("headers", ()):
            if name == _AUTH_HEADER and credential is None:
                credential = value.decode("latin-1")
            elif name == b"content-length":
                length = value
        client, path = scope.get("client") or ("", 0), scope.get("path", "")
        door = next((door for prefix, door in self.doors.items() if path.startswith(prefix)), None)
        cap = door.max_body_bytes if door is not None else self.max_body_bytes
        if door is not None:
            refusal = door.check(path, {name.decode("latin-1").lower(): value.decode("latin-1")
                                        for name, value in scope.get("headers", ())})
        else:
            refusal = self.authorize(path, credential, client[0])
        if refusal is None and length is not None:
            try:
                too_long = int(length) > cap
            except ValueError:
                refusal = Refusal(400, "invalid Content-Length", "invalid")
            else:
                refusal = _too_large(cap) if too_long else None
        if refusal is not None:
            hold_s = refusal.hold_s if refusal.hold_s is not None else TARPIT_S if refusal.status == 429 else 0.0
            if hold_s > 0:  # held a while: a flood goes at the server's pace, not its own
                await asyncio.sleep(hold_s)
            await _respond(send, refusal)
            return
        await self._capped(scope, receive, send, cap)

    async def _capped(self, scope: Scope, receive: Receive, send: Send, cap: int) -> None:
        received, started, refused, body_done = 0, False, False, False
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s

        async def cut(refusal: Refusal) -> None:
            nonlocal refused
            if not started and not refused:
                refused = True
                await _respond(send, refusal)
            raise _Cut()

        async def counting_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # what the app may still wait for (a disconnect) has no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except TimeoutError:
                await cut(Refusal(408, f"body not received within {self.body_timeout_s:g}s", "timeout"))
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > cap:
                    await cut(_too_large(cap))
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:  # the 413 went out; whatever the app answers to the aborted read is dropped
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not refused:
                raise


def _too_large(cap: int) -> Refusal:
    return Refusal(413, f"body larger than {cap} bytes", "too_large")


async def _respond(send: Send, refusal: Refusal) -> None:
    body = json.dumps({"detail": refusal.detail, "code": refusal.code}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if refusal.retry_after_s is not None:
        headers.append((b"retry-after", str(max(1, round(refusal.retry_after_s))).encode()))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
