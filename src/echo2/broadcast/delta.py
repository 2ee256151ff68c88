"""Lossless deltas between consecutive versions: XOR of the bit patterns, byte-shuffled, zstd.

Two consecutive versions of a policy differ by one optimizer step: most weights move in their
low mantissa bits only, and sign and exponent bytes stay put. XOR of the two payloads' bytes is
then mostly zero bytes in the high byte of every word; grouping byte 0 of every word, then byte
1, and so on (the "shuffle" filter of Blosc/HDF5) turns that into long zero runs that zstd
compresses far better than the raw XOR. Applying a delta reverses the three steps and must
reproduce the new payload bit for bit: the header carries the sha256 of the base it was made
against (a receiver holding another base gets :class:`DeltaMismatch` and falls back to the full
version) and of the result (checked after applying).

Payloads are safetensors bytes of the same layout (same tensors, dtypes and order: every
version of one run). ``word`` is the payload dtype's size (4 for float32, 2 for bfloat16).
"""

from __future__ import annotations

import struct

import numpy as np
import zstandard

from echo2.broadcast.integrity import CorruptPayload, sha256

_MAGIC = b"ECHO2DLT"
_HEADER = struct.Struct("<8s32s32sQB")  # magic, base sha256, result sha256, result length, word size


class DeltaMismatch(CorruptPayload):
    """The delta was made against another base (or for another layout): fetch the full version."""


def _shuffle(data: np.ndarray, word: int) -> np.ndarray:
    """Bytes regrouped by their position in each ``word``-byte word (the tail that fills no word kept last)."""
    whole = len(data) - len(data) % word
    return np.concatenate([data[:whole].reshape(-1, word).T.reshape(-1), data[whole:]])


def _unshuffle(data: np.ndarray, word: int) -> np.ndarray:
    whole = len(data) - len(data) % word
    return np.concatenate([data[:whole].reshape(word, -1).T.reshape(-1), data[whole:]])


def encode_delta(base: bytes, new: bytes, word: int, level: int = 3, threads: int = 0) -> bytes:
    """The delta that turns ``base`` into ``new`` (same length: one layout); ``level``: zstd's."""
    if len(base) != len(new):
        raise DeltaMismatch(f"payloads of {len(base)} and {len(new)} bytes have different layouts")
    if word not in (1, 2, 4, 8):
        raise ValueError(f"word must be 1, 2, 4 or 8 bytes, not {word}")
    xor = np.frombuffer(base, dtype=np.uint8) ^ np.frombuffer(new, dtype=np.uint8)
    body = zstandard.ZstdCompressor(level=level, threads=threads).compress(_shuffle(xor, word).tobytes())
    header = _HEADER.pack(_MAGIC, bytes.fromhex(sha256(base)), bytes.fromhex(sha256(new)), len(new), word)
    return header + body


def delta_base(delta: bytes) -> str:
    """The sha256 of the payload ``delta`` was made against."""
    return _header(delta)[1].hex()


def _header(delta: bytes) -> tuple:
    if len(delta) < _HEADER.size or delta[:8] != _MAGIC:
        raise CorruptPayload("not an echo2 delta (bad magic)")
    return _HEADER.unpack_from(delta)


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """``base`` turned into the delta's result, verified against the result's sha256."""
    _, base_hash, result_hash, length, word = _header(delta)
    if len(base) != length or sha256(base) != base_hash.hex():
        raise DeltaMismatch(f"this delta applies to the payload {base_hash.hex()[:12]}…, not to the one held")
    try:
        shuffled = zstandard.ZstdDecompressor().decompress(delta[_HEADER.size:], max_output_size=length)
    except zstandard.ZstdError as error:
        raise CorruptPayload(f"delta body does not decompress: {error}") from None
    if len(shuffled) != length:
        raise CorruptPayload(f"delta body holds {len(shuffled)} bytes, expected {length}")
    xor = _unshuffle(np.frombuffer(shuffled, dtype=np.uint8), word)
    result = (np.frombuffer(base, dtype=np.uint8) ^ xor).tobytes()
    if sha256(result) != result_hash.hex():
        raise CorruptPayload("the delta's result does not match its announced sha256")
    return result
