"""Checksums and the error every integrity failure raises; torch-free, so relays stay light.

:mod:`echo2.broadcast.payload` re-exports both names (the rest of echo2 imports them from there);
they live here so that a relay or downloader process never has to import torch.
"""

from __future__ import annotations

import hashlib


class CorruptPayload(ValueError):
    """Weights bytes that fail their checksum or do not fit the model."""


def sha256(payload: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(payload).hexdigest()
