"""A trained version's weights as a GGUF file llama.cpp loads (``rollout.engine=llamacpp``).

A llama.cpp worker starts from a GGUF file (quantized or not) and the learner trains the same file
dequantized (:mod:`echo2.model.sources`, transformers' GGUF reader). A full-weights version is
written back as a GGUF file: the base file's metadata kept whole (hyper-parameters, tokenizer, chat
template), each of its tensors replaced by the version's parameter of the same role in float32,
the HF name mapped to the GGUF one by the ``gguf`` package's own table (``TensorNameMap``, what
llama.cpp's converter uses), and for the ``llama`` architecture the query and key rows permuted as
llama.cpp's converter permutes them (transformers undoes that permutation when it reads a GGUF
file, so the learner's weights are in HF's order). Written float32, the file holds exactly the
learner's numbers: the quantization was the base's, and training leaves it behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

#: Architectures whose query/key rows llama.cpp's converter permutes (transformers' GGUF reader
#: reverses exactly these: ``modeling_gguf_pytorch_utils.TENSOR_PROCESSORS``' ``llama``).
PERMUTED_ARCHITECTURES = {"llama"}


def permute_rows(weights: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp's order of a query (``n_head_kv == n_head``) or key projection's rows."""
    heads = n_head_kv if n_head_kv != n_head else n_head
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_version(base: Path, parameters: Mapping[str, torch.Tensor], out: Path) -> Path:
    """``parameters`` (HF names, as :func:`echo2.broadcast.payload.wire_parameters` names a full
    version) as a float32 GGUF file at ``out`` with ``base``'s metadata and tensor set. A tensor of
    the base that no parameter maps to is an error (the version does not fit the engine's model);
    a parameter the base does not hold (``lm_head`` of a model with tied embeddings) is left out."""
    import gguf

    reader = gguf.GGUFReader(str(base))
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    blocks = int(reader.fields[f"{arch}.block_count"].contents())
    n_head = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_field = reader.fields.get(f"{arch}.attention.head_count_kv")
    n_head_kv = int(kv_field.contents()) if kv_field is not None else n_head
    names = gguf.get_tensor_name_map(next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), blocks)
    mapped: dict[str, np.ndarray] = {}
    for name, tensor in parameters.items():
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            continue
        array = tensor.detach().to(torch.float32).cpu().numpy()
        if arch in PERMUTED_ARCHITECTURES and ".attn_q." in target:
            array = permute_rows(array, n_head, n_head)
        elif arch in PERMUTED_ARCHITECTURES and ".attn_k." in target:
            array = permute_rows(array, n_head, n_head_kv)
        mapped[target] = array
    if missing := [t.name for t in reader.tensors if t.name not in mapped]:
        raise ValueError(f"the version has no parameter for {missing[:3]} of {base.name}")
    writer = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE) or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.ascontiguousarray(mapped[tensor.name]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
