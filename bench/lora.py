"""Bytes per version and dissemination time: full weights vs a LoRA adapter.

    python bench/lora.py [--quick] [--out DIR] [--cap-mib-s B] [--receivers N] [--rank R]

For each model (the shipped ``echo2/tiny-arith``; a randomly initialised ~88M-parameter Qwen2
built from a config, no download) and each payload (full weights and a rank-R LoRA adapter on
every projection, each in float32 and bfloat16 on the wire), one row measures

* ``publish_s``: the learner's :class:`~echo2.broadcast.publisher.Publisher` serialising,
  chunking and hashing the version (the real publisher code);
* ``broadcast_s``: until the last of N receivers holds the verified payload, over the real
  relay + downloader code on loopback, each a separate process (``bench/broadcast_node.py``), in a
  pipelined chain, every upload capped at B (as in ``bench/broadcast.py``);
* ``apply_s``: a worker copying the payload into its model (:func:`load_parameters`; for the
  adapter, into its own base model wrapped in the same adapter).

Expected: bytes ∝ trained parameters (an r-rank adapter of a d_out x d_in weight has
r (d_in + d_out) of its d_in d_out), and broadcast time ∝ bytes once the payload dwarfs a
chunk. ``--quick`` (the test suite's variant) runs the shipped model only, float32, 2 receivers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
from broadcast import NodeProcess, run_one  # noqa: E402
from common import format_table, write_results  # noqa: E402

from echo2.broadcast.payload import load_parameters  # noqa: E402
from echo2.broadcast.publisher import Publisher  # noqa: E402
from echo2.config import BroadcastConfig, LoraConfig  # noqa: E402
from echo2.model.loading import load_model  # noqa: E402
from echo2.model.lora import add_adapter  # noqa: E402
from echo2.protocol import AdapterSpec  # noqa: E402
from echo2.units import MIB  # noqa: E402


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cap-mib-s", type=float, default=8.0, help="upload cap B of every node (MiB/s)")
    parser.add_argument("--receivers", type=int, default=None, help="N receivers in the chain (default 4; quick 2)")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank r")
    parser.add_argument("--chunk-kib", type=int, default=None, help="chunk size (default 1024; quick 64)")


def parse_args() -> argparse.Namespace:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/lora", _options)
    args.receivers = args.receivers or (2 if args.quick else 4)
    args.chunk_kib = args.chunk_kib or (64 if args.quick else 1024)
    args.in_flight = 2
    return args


def random_qwen2() -> Any:
    """A Qwen2 of ~88M parameters (12 heads of 64, 4 KV heads, 10 layers, 32k vocabulary, tied
    embeddings), randomly initialised: the size of the payload is what matters here."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=10,
                         num_attention_heads=12, num_key_value_heads=4, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).eval()


def payload_rows(name: str, build: Any, dtypes: list[str], rank: int, work: Path) -> list[dict[str, Any]]:
    """Publish each payload of model ``name`` once with the real publisher; keep it in a file for the nodes."""
    lora = LoraConfig(r=rank)
    spec = AdapterSpec(r=lora.r, alpha=lora.alpha, dropout=lora.dropout, target_modules=lora.target_modules)
    rows = []
    for kind in ("full", "lora"):
        model = build() if kind == "full" else add_adapter(build(), spec)
        receiver = build() if kind == "full" else add_adapter(build(), spec)
        params = sum(p.numel() for p in model.parameters() if kind == "full" or p.requires_grad)
        for dtype in dtypes:
            publisher = Publisher(BroadcastConfig(dtype=dtype), keep_versions=1, token=None, kind=kind)
            started = time.perf_counter()
            published = publisher.publish(1, model)
            sha256, size = published.sha256, published.size_bytes
            publish_s = time.perf_counter() - started
            payload = publisher.store.payload(1)
            publisher.close()
            started = time.perf_counter()
            load_parameters(receiver, payload, sha256, kind)
            apply_s = time.perf_counter() - started
            path = work / f"{name}-{kind}-{dtype}.safetensors"
            path.write_bytes(payload)
            rows.append({"model": name, "payload": "full" if kind == "full" else f"lora r={rank}", "kind": kind,
                         "dtype": dtype, "params_on_wire": params, "bytes": size, "MiB": size / MIB,
                         "publish_s": publish_s, "apply_s": apply_s, "path": str(path)})
    return rows


def main() -> None:
    args = parse_args()
    (args.out / "nodes").mkdir(parents=True, exist_ok=True)
    dtypes = ["float32"] if args.quick else ["float32", "bfloat16"]
    models = [("tiny-arith (0.45M)", lambda: load_model("echo2/tiny-arith"))]
    if not args.quick:
        models.append(("random Qwen2 (88M)", random_qwen2))
    cap = args.cap_mib_s * MIB
    with tempfile.TemporaryDirectory() as work:
        rows = [row for name, build in models for row in payload_rows(name, build, dtypes, args.rank, Path(work))]
        nodes = [NodeProcess(f"n{i}", cap, 0.0, args.out / "nodes") for i in range(args.receivers + 1)]
        try:
            for node in nodes:
                node.url = node.expect("ready", 60)["url"]
            for version, row in enumerate(rows, start=1):
                spread = run_one(nodes[0], nodes[1:], version, {"payload_path": row.pop("path"), "kind": row["kind"]},
                                 "pipelined", args)
                assert spread["verified"], row
                row.update(broadcast_s=spread["seconds"], bound_s=spread["bound_s"], N=spread["N"])
                print(f"== {row['model']} {row['payload']} {row['dtype']}: {row['MiB']:.3f} MiB, "
                      f"{row['broadcast_s']:.2f}s", flush=True)
        finally:
            for node in nodes:
                node.close()
    for row in rows:
        full = next(r for r in rows if r["model"] == row["model"] and r["kind"] == "full" and r["dtype"] == "float32")
        row["bytes_vs_full_f32"] = row["bytes"] / full["bytes"]
        row["time_vs_full_f32"] = row["broadcast_s"] / full["broadcast_s"]
    columns = ["model", "payload", "dtype", "params_on_wire", "MiB", "bytes_vs_full_f32", "publish_s", "broadcast_s",
               "time_vs_full_f32", "apply_s"]
    print(f"\npipelined chain of N = {args.receivers} receivers, every upload capped at B = {args.cap_mib_s:g} MiB/s, "
          f"chunk {args.chunk_kib} KiB")
    print(format_table(rows, columns))
    meta = {"quick": args.quick, "cap_mib_s": args.cap_mib_s, "receivers": args.receivers, "rank": args.rank,
            "chunk_kib": args.chunk_kib}
    path = write_results(args.out, rows, meta)
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'lora.png'}")


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    short = {"float32": "f32", "bfloat16": "bf16"}
    labels = [f"{r['model'].split(' ')[0]}\n{r['payload']} {short[r['dtype']]}" for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(rows)), 4.5))
    for ax, key, title in ((axes[0], "MiB", "bytes per version (MiB)"),
                           (axes[1], "broadcast_s", "seconds until the last receiver verified it")):
        ax.bar(range(len(rows)), [r[key] for r in rows],
               color=["tab:blue" if r["kind"] == "full" else "tab:orange" for r in rows])
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out / "lora.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
