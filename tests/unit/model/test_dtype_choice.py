"""``model.dtype: auto``: bf16 only where the hardware computes it, float32 elsewhere, with the reason."""

import pytest

from echo2.config import load_config
from echo2.config.run import dump_config
from echo2.model.dtype_choice import choose_for, cpu_flags

AVX2_ONLY = {"fpu", "sse2", "avx", "avx2", "fma"}


@pytest.mark.parametrize(("flags", "cuda", "dtype", "said"), [
    (AVX2_ONLY, False, "float32", "emulated"),
    (AVX2_ONLY | {"avx512f", "avx512_bf16"}, False, "bfloat16", "avx512_bf16"),
    (AVX2_ONLY | {"amx_bf16", "amx_tile"}, False, "bfloat16", "amx_bf16"),
    (AVX2_ONLY | {"avx512f"}, False, "float32", "emulated"),  # AVX-512 without its bf16 extension
    (None, False, "float32", "unknown"),
    (AVX2_ONLY, True, "bfloat16", "CUDA"),
])
def test_bf16_only_where_the_hardware_computes_it(flags, cuda, dtype, said):
    choice = choose_for(flags, cuda)
    assert choice.dtype == dtype and said in choice.reason


def test_cpu_flags_read_from_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") is None


def test_auto_resolves_when_the_config_loads_and_keeps_why(monkeypatch):
    monkeypatch.setattr("echo2.config.run.fastest_dtype", lambda: choose_for(AVX2_ONLY, False))
    config = load_config(None, ["model.dtype=auto"])
    assert config.model.dtype == "float32" and "emulated" in config.model.dtype_reason
    assert "model:\n  name: echo2/tiny-arith\n  dtype: float32\n" in dump_config(config)  # what the run directory keeps
    assert load_config(None, ["model.dtype=bfloat16"]).model.dtype_reason is None
