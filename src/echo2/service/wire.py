"""The Tinker API's protobuf bodies, read and written with the schema the ``tinker`` SDK ships.

Since SDK 0.22.3 a ``forward_backward`` request body is protobuf (``application/x-protobuf``,
zstd-compressed when the server's ``client/config`` asks for it), and since 0.25 the SDK refuses
sampling and forward-backward results that are not protobuf. The schema is the SDK's own
(``tinker.proto.tinker_public_pb2``) and so are the types built from it; this module is the
server's side of the SDK's ``tinker/proto/request_conv.py`` and ``response_conv.py``: it decodes
what those encode and encodes what those decode.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import zstandard
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

#: The most bytes a zstd body may decompress to (four times the largest body the server reads).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
#: The token ids of an ``encoded_text`` chunk travel as little-endian int32.
_TOKEN_DTYPE = np.dtype("<i4")
_DTYPES = {pb.DTYPE_FLOAT32: ("float32", np.dtype("<f4")), pb.DTYPE_INT64: ("int64", np.dtype("<i8"))}
_STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


@dataclass
class ProtoResult:
    """A result the SDK takes as protobuf only (forward-backward, sampling); a sampling result also
    names the version that sampled it (sent as the ``X-Echo2-Version`` header)."""

    body: bytes
    version: int | None = None


class WireError(ValueError):
    """A body that is not what the schema says (the message says where)."""


def _tensor(message: pb.Tensor, where: str) -> types.TensorData:
    if message.dtype not in _DTYPES:
        raise WireError(f"{where}: dtype {message.dtype} is not float32 or int64")
    dtype, np_dtype = _DTYPES[message.dtype]
    shape = list(message.shape) or None
    if message.HasField("sparse_csr"):
        csr = message.sparse_csr
        return types.TensorData(data=np.frombuffer(csr.values, dtype=np_dtype).copy(), dtype=dtype, shape=shape,
                                sparse_crow_indices=np.frombuffer(csr.crow_indices, dtype="<i8").tolist(),
                                sparse_col_indices=np.frombuffer(csr.col_indices, dtype="<i8").tolist())
    return types.TensorData(data=np.frombuffer(message.dense, dtype=np_dtype).copy(), dtype=dtype, shape=shape)


def _datum(message: pb.Datum, index: int) -> types.Datum:
    chunks = []
    for chunk in message.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise WireError(f"datum {index}: only encoded_text chunks are supported (images and audio are not), "
                            f"got {chunk.WhichOneof('chunk')}")
        chunks.append(types.EncodedTextChunk(tokens=np.frombuffer(chunk.encoded_text.tokens, _TOKEN_DTYPE).tolist()))
    inputs = {name: _tensor(tensor, f"datum {index} {name}") for name, tensor in message.loss_fn_inputs.items()}
    return types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs)


def unzstd(body: bytes, most: int) -> bytes:
    """``body`` decompressed, read a chunk at a time and refused past ``most`` bytes: a frame that
    does not say its size had been given a 2 GiB output buffer (a 32 KB body: +768 MB of the
    service's memory, 0.69 s of its event loop)."""
    out, size = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)) as reader:
            while chunk := reader.read(1 << 20):
                size += len(chunk)
                if size > most:
                    raise WireError(f"the body decompresses to more than {most} bytes")
                out.append(chunk)
    except zstandard.ZstdError as error:
        raise WireError(f"the body is not zstd: {error}") from None
    return b"".join(out)


def forward_backward_request(body: bytes, content_encoding: str | None) -> tuple[types.ForwardBackwardRequest, bool]:
    """A protobuf ``forward_backward`` body as the SDK's request type, and its ``forward_only`` flag."""
    if content_encoding == "zstd":
        body = unzstd(body, MAX_DECOMPRESSED_BYTES)
    elif content_encoding not in (None, "", "identity"):
        raise WireError(f"Content-Encoding {content_encoding!r} is not supported (zstd or none)")
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except Exception as error:  # protobuf's DecodeError, or anything a malformed body raises in it
        raise WireError(f"the body is not a ForwardBackwardRequest: {error}") from None
    config: dict[str, float | str] = {key: value.text if value.WhichOneof("value") == "text" else value.number
                                      for key, value in message.loss_fn_config_v2.items()}
    for key, number in message.loss_fn_config.items():
        config.setdefault(key, number)
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[_datum(datum, index) for index, datum in enumerate(message.data)],
            loss_fn=message.loss_fn, loss_fn_config=config or None),
        model_id=message.model_id, seq_id=message.seq_id)
    return request, message.forward_only


def _batched(arrays: list[np.ndarray], dtype: int, np_dtype: np.dtype) -> pb.BatchedTensor:
    """Per-datum 1-D arrays as one BatchedTensor (byte offsets of each datum's slice)."""
    parts = [np.ascontiguousarray(a, dtype=np_dtype) for a in arrays]
    offsets = np.cumsum([0, *(p.nbytes for p in parts)]).astype("<i8")
    return pb.BatchedTensor(data=b"".join(p.tobytes() for p in parts), offsets=offsets.tobytes(), dtype=dtype)


def forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A forward-backward result: per datum float32 arrays (``logprobs``, ``elementwise_loss``) and
    metrics, each metric key carrying its reduction (``loss:sum``), as the SDK's chunk merger needs."""
    if bad := [key for key in metrics if ":" not in key]:
        raise ValueError(f"metric keys {bad} lack a reduction (name:sum, name:mean, ...)")
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in (outputs[0] if outputs else {}):
        record.fields[name].CopyFrom(_batched([o[name] for o in outputs], pb.DTYPE_FLOAT32, np.dtype("<f4")))
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record],
                                       metrics={k: float(v) for k, v in metrics.items()})
    return message.SerializeToString()


def sample_response(sequences: list[tuple[list[int], list[float], str]],
                    prompt_logprobs: list[float] | None = None) -> bytes:
    """A sampling result: each sequence's tokens, their log-probs and why it stopped (``stop`` or
    ``length``); ``prompt_logprobs``: one per prompt token, NaN for the first (nothing predicts it)."""
    message = pb.SampleResponse(sequences=[
        pb.SampledSequence(stop_reason=_STOP_REASONS[reason], tokens=np.asarray(tokens, _TOKEN_DTYPE).tobytes(),
                           logprobs=np.asarray(logprobs, "<f4").tobytes())
        for tokens, logprobs, reason in sequences])
    if prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt_logprobs, "<f4").tobytes()
    return message.SerializeToString()
