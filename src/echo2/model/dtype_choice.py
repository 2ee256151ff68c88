"""``model.dtype: auto``: the compute dtype that is fastest on this machine, with the reason.

bfloat16 halves memory and, where the hardware has bf16 arithmetic (CUDA GPUs from Ampere on, x86
CPUs with ``avx512_bf16`` or AMX), runs about 3x faster than float32. Where it has none — AVX2-only
CPUs, most laptops — PyTorch emulates it and a bf16 matmul runs at about a quarter of float32's
speed: SmolLM2-135M decodes 28 tokens/s in bf16 and 118 in float32 at 32 rows on such a CPU, and the
recipe as shipped in bf16 looked hung there. ``auto`` is resolved once, where the config is loaded
(the learner's machine), and the run's workers are handed the concrete dtype with the run spec: the
audit's draw tolerance depends on the dtype the workers sample in, so one run has one.

No torch import unless CUDA has to be asked about (configs load without it otherwise).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

#: CPU flags (Linux ``/proc/cpuinfo``) under which PyTorch's CPU kernels compute bf16 natively.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    reason: str


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The first CPU's flags, or None where the file is missing (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def choose_for(flags: set[str] | None, cuda_bf16: bool) -> DtypeChoice:
    """The rule, kept pure for its table test."""
    if cuda_bf16:
        return DtypeChoice("bfloat16", "a CUDA GPU with bf16 arithmetic")
    if flags is None:
        return DtypeChoice("float32", "the CPU's flags are unknown here (no /proc/cpuinfo); float32 is never slow")
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if native:
        return DtypeChoice("bfloat16", f"this CPU computes bf16 natively ({', '.join(native)})")
    return DtypeChoice("float32", "this CPU has no avx512_bf16 or AMX: bf16 would be emulated, ~4x slower "
                                  "than float32")


def cuda_has_bf16() -> bool:
    """Whether a CUDA device with bf16 is present; asked only when torch is installed."""
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


@cache
def fastest_dtype() -> DtypeChoice:
    """What ``auto`` means on this machine (asked once a process)."""
    return choose_for(cpu_flags(), cuda_has_bf16())
