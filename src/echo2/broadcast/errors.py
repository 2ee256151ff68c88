"""How fetching a version fails, as the caller sees it, and a source's refusal as it reads it."""

from __future__ import annotations

import httpx


class BroadcastError(RuntimeError):
    """A version could not be fetched (the message says which, and the last problems seen)."""


class BroadcastTimeout(BroadcastError, TimeoutError):
    """The version was not complete within ``timeout_s``."""


class BroadcastCancelled(BroadcastError):
    """The ``cancel`` event was set."""


class VersionSuperseded(BroadcastError):
    """A source will never serve the version asked for: it evicted it or went on to a newer one
    (relays fetch versions in increasing order). The version is outdated, so the fetch stops at
    once and the caller asks for the newest instead. Falling back to the learner for the outdated
    version would put a relay's child on the learner's uplink beside the chain's head, halving
    both transfers on a capped uplink; the child would then fall behind again and again."""


def error_body(response: httpx.Response) -> dict:
    """A source's JSON error body, or {} when it sent none."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def error_code(response: httpx.Response) -> str | None:
    """The machine-readable ``code`` of a source's refusal (e.g. ``evicted``), if it gave one."""
    code = error_body(response).get("code")
    return code if isinstance(code, str) else None
