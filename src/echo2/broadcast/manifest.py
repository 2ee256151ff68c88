"""A version's payload cut into fixed-size, individually hashed chunks, described by a manifest.

Chunks are what peers relay: each is verified on arrival against the manifest, so a node can
pass chunk *i* on while chunk *i+1* is still coming in, and a bad chunk is re-fetched alone
instead of restarting the whole download. The manifest also lists the tensors (read from the
safetensors header) so a receiver can tell what it is getting before the bytes arrive; a LoRA
adapter travels the same way with ``kind="lora"`` (just another tensor set). A *delta* version
(``encoding="delta"``, :mod:`echo2.broadcast.delta`) is chunked the same way; its payload is the
compressed difference from the version whose sha256 is ``base_sha256``, not safetensors, so it
lists no tensors.

Torch-free on purpose: relays and downloaders only need this module, not a model.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from echo2.broadcast.integrity import CorruptPayload, sha256

#: Default chunk size: small enough that the pipeline fill ``(depth - 1) * chunk / B`` stays short,
#: large enough that per-request overhead is a few percent at most.
DEFAULT_CHUNK_SIZE = 1024 * 1024

#: Largest safetensors header accepted (the format itself caps it at 100 MB).
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: safetensors dtype codes of the payload dtypes a manifest may declare.
_FLOAT_CODES = {"F16", "BF16", "F32", "F64"}
_DTYPE_CODES = {"float32": "F32", "bfloat16": "BF16"}

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Model(BaseModel):
    """Strict, as the wire messages are (:class:`echo2.protocol.Message`): a manifest comes from an
    untrusted relay, and a chunk size or version sent as a string is refused, not coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ChunkInfo(_Model):
    index: int = Field(ge=0)
    size: int = Field(ge=1)
    sha256: Sha256Hex


class TensorInfo(_Model):
    name: str
    dtype: str
    """safetensors dtype code, e.g. ``F32``, ``BF16``."""
    shape: list[int]


class Manifest(_Model):
    """Everything a receiver needs to fetch and verify one version, chunk by chunk."""

    version: int = Field(ge=0)
    kind: Literal["full", "lora", "bundle"] = "full"
    dtype: Literal["float32", "bfloat16"] = "float32"
    chunk_size: int = Field(ge=1)
    total_bytes: int = Field(ge=1)
    sha256: Sha256Hex
    """Hash of the whole payload: checked once every chunk is in (catches a forged manifest)."""
    chunks: list[ChunkInfo]
    tensors: list[TensorInfo] = Field(default_factory=list)
    encoding: Literal["full", "delta"] = "full"
    """``delta``: the payload turns the version whose hash is ``base_sha256`` into this one."""
    base_sha256: Sha256Hex | None = None

    @model_validator(mode="after")
    def _chunks_tile_the_payload(self) -> Manifest:
        if (self.encoding == "delta") != (self.base_sha256 is not None):
            raise ValueError("a delta manifest names its base's sha256, and only a delta manifest does")
        if [c.index for c in self.chunks] != list(range(len(self.chunks))):
            raise ValueError("chunk indices must be 0, 1, 2, ... in order")
        if sum(c.size for c in self.chunks) != self.total_bytes:
            raise ValueError(f"chunk sizes add up to {sum(c.size for c in self.chunks)}, not {self.total_bytes}")
        if any(c.size != self.chunk_size for c in self.chunks[:-1]) or self.chunks[-1].size > self.chunk_size:
            raise ValueError(f"every chunk but the last must be {self.chunk_size} bytes (the last at most that)")
        return self

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)


def read_tensor_infos(payload: bytes) -> list[TensorInfo]:
    """The tensors listed in a safetensors header (8-byte little-endian length, then JSON)."""
    if len(payload) < 8:
        raise CorruptPayload(f"payload of {len(payload)} bytes is too short to be safetensors")
    length = int.from_bytes(payload[:8], "little")
    if length > min(MAX_HEADER_BYTES, len(payload) - 8):
        raise CorruptPayload(f"safetensors header claims {length} bytes; the payload has {len(payload)}")
    try:
        header = json.loads(payload[8:8 + length])
        return [TensorInfo(name=name, dtype=info["dtype"], shape=info["shape"])
                for name, info in header.items() if name != "__metadata__"]
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise CorruptPayload(f"payload is not valid safetensors ({type(error).__name__}: {error})") from None


def _payload_dtype(tensors: list[TensorInfo], declared: str | None) -> str:
    codes = {t.dtype for t in tensors if t.dtype in _FLOAT_CODES}
    if declared is None:
        found = [name for name, code in _DTYPE_CODES.items() if codes == {code}]
        if codes and not found:
            raise ValueError(f"cannot tell the payload dtype from its tensors ({sorted(codes)}); pass dtype=")
        return found[0] if found else "float32"
    if declared not in _DTYPE_CODES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_CODES)}, not {declared!r}")
    if codes - {_DTYPE_CODES[declared]}:
        raise ValueError(f"dtype={declared!r} but the payload holds {sorted(codes)} tensors")
    return declared


def build_manifest(payload: bytes, version: int, chunk_size: int = DEFAULT_CHUNK_SIZE,
                   kind: Literal["full", "lora", "bundle"] = "full", dtype: str | None = None,
                   base_sha256: str | None = None) -> tuple[Manifest, list[bytes]]:
    """Cut ``payload`` (safetensors bytes; a delta with ``base_sha256``) into chunks and describe them.

    ``dtype`` defaults to the one the payload's floating tensors share (``float32`` if none); a
    delta's must be given (it describes the version the delta rebuilds).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, not {chunk_size}")
    if not payload:
        raise CorruptPayload("cannot broadcast an empty payload")
    if base_sha256 is not None and dtype is None:
        raise ValueError("a delta's manifest needs the dtype of the version it rebuilds")
    tensors = read_tensor_infos(payload) if base_sha256 is None else []
    view = memoryview(payload)
    chunks = [bytes(view[start:start + chunk_size]) for start in range(0, len(payload), chunk_size)]
    manifest = Manifest(
        version=version, kind=kind, dtype=_payload_dtype(tensors, dtype), chunk_size=chunk_size,
        total_bytes=len(payload), sha256=sha256(payload), tensors=tensors,
        chunks=[ChunkInfo(index=i, size=len(c), sha256=sha256(c)) for i, c in enumerate(chunks)],
        encoding="full" if base_sha256 is None else "delta", base_sha256=base_sha256,
    )
    return manifest, chunks


def verify_chunk(manifest: Manifest, index: int, data: bytes) -> None:
    """Raise :class:`CorruptPayload`, naming the chunk, unless ``data`` is chunk ``index`` of ``manifest``."""
    if not 0 <= index < manifest.num_chunks:
        raise CorruptPayload(f"v{manifest.version} has no chunk {index} (it has {manifest.num_chunks})")
    info = manifest.chunks[index]
    if len(data) != info.size:
        raise CorruptPayload(f"v{manifest.version} chunk {index}: {len(data)} bytes, expected {info.size}")
    if sha256(data) != info.sha256:
        raise CorruptPayload(f"v{manifest.version} chunk {index}: sha256 mismatch (corrupt or tampered)")


def verify_whole(manifest: Manifest, chunks: list[bytes]) -> None:
    """Check the concatenation of ``chunks`` against the manifest's whole-payload hash, without joining them."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    if digest.hexdigest() != manifest.sha256:
        raise CorruptPayload(f"v{manifest.version}: the chunks verify but the whole payload does not match "
                             "the manifest's sha256 (forged or inconsistent manifest)")


def assemble(manifest: Manifest, chunks: list[bytes]) -> bytes:
    """Join verified chunks back into the payload; every chunk and the whole are checked."""
    if len(chunks) != manifest.num_chunks:
        raise CorruptPayload(f"v{manifest.version}: {len(chunks)} chunks given, the manifest has "
                             f"{manifest.num_chunks}")
    for index, chunk in enumerate(chunks):
        verify_chunk(manifest, index, chunk)
    payload = b"".join(chunks)
    if sha256(payload) != manifest.sha256:
        raise CorruptPayload(f"v{manifest.version}: the chunks verify but the whole payload does not match "
                             "the manifest's sha256 (forged or inconsistent manifest)")
    return payload
