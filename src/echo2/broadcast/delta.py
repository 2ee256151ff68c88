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

A version of another layout (a training service's bundle that gained or lost a sampler,
:mod:`echo2.broadcast.bundle`) is a delta against a *rebased* base: a buffer of the new payload's
length, zero but for the byte ranges ``copies`` names, each a run of the held payload put where the
same tensor (or its predecessor) lies in the new one. The copies travel in the delta's header, so a
receiver builds the same rebased base from the payload it holds; what the new version has that the
held one lacks (its header, a new sampler) is XORed against zeros, and what it kept is XORed against
itself — zero bytes, which compress to nothing.
"""

from __future__ import annotations

import struct

import numpy as np
import zstandard

from echo2.broadcast.integrity import CorruptPayload, sha256

_MAGIC = b"ECHO2DLT"
_HEADER = struct.Struct("<8s32s32sQBI")  # magic, base sha256, result sha256, result length, word size, copies
_COPY = struct.Struct("<QQQ")  # a rebased base's run: where in it, where in the held payload, how many bytes

#: A run of the held payload in a rebased base: (offset in the base, offset in the held payload, length).
Copy = tuple[int, int, int]


class DeltaMismatch(CorruptPayload):
    """The delta was made against another base (or for another layout): fetch the full version."""


def _shuffle(data: np.ndarray, word: int) -> np.ndarray:
    """Bytes regrouped by their position in each ``word``-byte word (the tail that fills no word kept last)."""
    whole = len(data) - len(data) % word
    return np.concatenate([data[:whole].reshape(-1, word).T.reshape(-1), data[whole:]])


def _unshuffle(data: np.ndarray, word: int) -> np.ndarray:
    whole = len(data) - len(data) % word
    return np.concatenate([data[:whole].reshape(word, -1).T.reshape(-1), data[whole:]])


def encode_delta(base: bytes, new: bytes, word: int, level: int = 3, threads: int = 0,
                 copies: list[Copy] | None = None) -> bytes:
    """The delta that turns ``base`` into ``new``: of the same length (one layout), or, with
    ``copies``, of any layout, against ``base`` rebased by them (:func:`rebased`); ``level``: zstd's."""
    if copies is None and len(base) != len(new):
        raise DeltaMismatch(f"payloads of {len(base)} and {len(new)} bytes have different layouts")
    if word not in (1, 2, 4, 8):
        raise ValueError(f"word must be 1, 2, 4 or 8 bytes, not {word}")
    against = base if copies is None else rebased(base, len(new), copies)
    xor = np.frombuffer(against, dtype=np.uint8) ^ np.frombuffer(new, dtype=np.uint8)
    body = zstandard.ZstdCompressor(level=level, threads=threads).compress(_shuffle(xor, word).tobytes())
    runs = copies or []
    header = _HEADER.pack(_MAGIC, bytes.fromhex(sha256(base)), bytes.fromhex(sha256(new)), len(new), word, len(runs))
    return header + b"".join(_COPY.pack(*run) for run in runs) + body


def rebased(held: bytes, length: int, copies: list[Copy]) -> bytes:
    """``length`` zero bytes but for ``copies``: each ``(at, source, size)`` puts ``held[source :
    source + size]`` at ``at``; a run outside either buffer is a corrupt delta."""
    base = bytearray(length)
    for at, source, size in copies:
        if at + size > length or source + size > len(held):
            raise DeltaMismatch(f"a rebasing run ({at}, {source}, {size}) falls outside the payloads "
                                f"({length} and {len(held)} bytes)")
        base[at : at + size] = held[source : source + size]
    return bytes(base)


def delta_base(delta: bytes) -> str:
    """The sha256 of the payload ``delta`` was made against."""
    return _header(delta)[1].hex()


def _header(delta: bytes) -> tuple:
    if len(delta) < _HEADER.size or delta[:8] != _MAGIC:
        raise CorruptPayload("not an echo2 delta (bad magic)")
    header = _HEADER.unpack_from(delta)
    if len(delta) < _HEADER.size + header[5] * _COPY.size:
        raise CorruptPayload(f"the delta is cut short inside its {header[5]} rebasing runs")
    return header


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """``base`` turned into the delta's result (``base`` rebased first when the delta says how),
    verified against the result's sha256."""
    _, base_hash, result_hash, length, word, runs = _header(delta)
    if (not runs and len(base) != length) or sha256(base) != base_hash.hex():
        raise DeltaMismatch(f"this delta applies to the payload {base_hash.hex()[:12]}…, not to the one held")
    body = _HEADER.size + runs * _COPY.size
    if runs:
        base = rebased(base, length, [_COPY.unpack_from(delta, _HEADER.size + k * _COPY.size) for k in range(runs)])
    try:
        shuffled = zstandard.ZstdDecompressor().decompress(delta[body:], max_output_size=length)
    except zstandard.ZstdError as error:
        raise CorruptPayload(f"delta body does not decompress: {error}") from None
    if len(shuffled) != length:
        raise CorruptPayload(f"delta body holds {len(shuffled)} bytes, expected {length}")
    xor = _unshuffle(np.frombuffer(shuffled, dtype=np.uint8), word)
    result = (np.frombuffer(base, dtype=np.uint8) ^ xor).tobytes()
    if sha256(result) != result_hash.hex():
        raise CorruptPayload("the delta's result does not match its announced sha256")
    return result
