"""Credentials kept out of files others can read: ``<redacted>`` in their place.

The run token lives only in the owner-only ``RUN_DIR/token`` and ``RUN_DIR/coordinator.json``;
``RUN_DIR/config.yaml`` and the report show :data:`REDACTED` instead (:func:`redact_config`).
:func:`redact_logs` puts a filter on every handler of the root logger that replaces the given
secrets (the run token, the broadcast credential) and anything shaped like a session credential
(:data:`SESSION_CREDENTIAL`) in every message and traceback, should one ever be logged.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
#: A worker's session credential as :class:`echo2.coordinator.registry.WorkerRegistry` makes them:
#: ``w<n>-<6 hex>.<32 url-safe characters>``.
SESSION_CREDENTIAL = re.compile(r"(?<![A-Za-z0-9_-])w\d+-[0-9a-f]{6}\.[A-Za-z0-9_-]{32}(?![A-Za-z0-9_-])")


class RedactSecrets(logging.Filter):
    """Replaces ``secrets`` and session credentials in a record's message and traceback."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        # whole words only (a credential is never part of a longer one): a short token must not
        # take every occurrence of its letters with it
        words = "|".join(re.escape(s) for s in sorted({s for s in secrets if s}, key=len, reverse=True))
        self.pattern = re.compile(rf"(?<![A-Za-z0-9_-])(?:{words})(?![A-Za-z0-9_-])") if words else None

    def redact(self, text: str) -> str:
        if self.pattern is not None:
            text = self.pattern.sub(REDACTED, text)
        return SESSION_CREDENTIAL.sub(REDACTED, text)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: let the handler report it as usual
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def redact_logs(*secrets: str) -> RedactSecrets:
    """Filter every handler the root logger has now (the console, the run's log file) through
    one :class:`RedactSecrets`; ``remove_redaction`` takes it off again."""
    redaction = RedactSecrets(list(secrets))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redaction)
    return redaction


def remove_redaction(redaction: RedactSecrets) -> None:
    for handler in logging.getLogger().handlers:
        handler.removeFilter(redaction)


def redact_config(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a config as plain data) with ``coordinator.token`` replaced by :data:`REDACTED`."""
    coordinator = data.get("coordinator")
    if isinstance(coordinator, dict) and coordinator.get("token") not in (None, REDACTED):
        data = {**data, "coordinator": {**coordinator, "token": REDACTED}}
    return data
