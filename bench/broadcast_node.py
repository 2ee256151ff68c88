"""A standalone broadcast node (relay + downloader) driven by JSON lines: what the benchmark spawns.

    python bench/broadcast_node.py [--host H] [--port P] [--cap-bytes-s B] [--latency-s L] [--token T]

Each node is its own OS process with its own :class:`ChunkStore`, a :class:`RelayServer` whose
uploads are capped at ``B`` bytes/s, and the downloader. It prints ``{"event": "ready", "url": ...}``
on stdout, then reads one command per line on stdin and answers each with one JSON line:

* ``{"cmd": "publish", "version": v, "payload_bytes": M, "chunk_size": c, "seed": s}`` — become
  a root source: hold a random float32 safetensors payload of ``M`` bytes (answer: its sha256,
  total bytes and chunk count); with ``"payload_path": file`` (and optionally ``"kind": "lora"``)
  instead of ``payload_bytes``, hold that file's safetensors payload (e.g. a real model's), or with
  ``"base_sha256"`` and ``"dtype"`` a delta version's payload (:mod:`echo2.broadcast.delta`);
* ``{"cmd": "fetch", "version": v, "sources": [urls], ...fetch_version options}`` — fetch it,
  relaying meanwhile; the answer carries ``done_at`` (wall clock, for timing across processes),
  the whole-payload sha256 (verified), bytes per source and failovers;
* ``{"cmd": "drop", "version": v}``, ``{"cmd": "exit"}``.

Torch-free: a node process needs only the broadcast layer, FastAPI, httpx and numpy.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from echo2.broadcast.chunk_store import ChunkStore
from echo2.broadcast.downloader import fetch_version
from echo2.broadcast.manifest import DEFAULT_CHUNK_SIZE
from echo2.broadcast.relay import RelayServer
from echo2.broadcast.throttle import Throttle

FETCH_OPTIONS = ("timeout_s", "stall_s", "poll_s", "patience_s", "in_flight", "expected_sha256")


def random_payload(payload_bytes: int, seed: int) -> bytes:
    """A safetensors payload holding one float32 tensor of ``payload_bytes`` random bytes."""
    import numpy as np
    from safetensors.numpy import save

    if payload_bytes <= 0 or payload_bytes % 4:
        raise ValueError(f"payload_bytes must be a positive multiple of 4, not {payload_bytes}")
    data = np.frombuffer(np.random.default_rng(seed).bytes(payload_bytes), dtype=np.float32)
    return save({"weights": data})


def handle(command: dict[str, Any], store: ChunkStore, token: str | None, http: httpx.Client) -> dict[str, Any]:
    kind, version = command.get("cmd"), command.get("version")
    if kind == "publish":
        if "payload_path" in command:
            payload = Path(command["payload_path"]).read_bytes()
        else:
            payload = random_payload(int(command["payload_bytes"]), int(command.get("seed", 0)))
        manifest = store.publish(version, payload, int(command.get("chunk_size", DEFAULT_CHUNK_SIZE)),
                                 kind=command.get("kind", "full"), dtype=command.get("dtype"),
                                 base_sha256=command.get("base_sha256"))
        return {"event": "published", "version": version, "sha256": manifest.sha256,
                "total_bytes": manifest.total_bytes, "chunks": manifest.num_chunks}
    if kind == "fetch":
        options = {key: command[key] for key in FETCH_OPTIONS if key in command}
        result = fetch_version(version, command["sources"], store, token=token, assemble=False, client=http, **options)
        stats = result.stats
        return {"event": "fetched", "version": version, "done_at": time.time(), "seconds": stats.seconds,
                "sha256": result.manifest.sha256, "total_bytes": result.manifest.total_bytes,
                "bytes_by_source": stats.bytes_by_source, "failovers": stats.failovers}
    if kind == "drop":
        store.drop(version)
        return {"event": "dropped", "version": version}
    raise ValueError(f"unknown command {kind!r} (publish, fetch, drop, exit)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cap-bytes-s", type=float, default=None, help="upload cap (default: unlimited)")
    parser.add_argument("--latency-s", type=float, default=0.0, help="added delay per response")
    parser.add_argument("--token", default=None, help="shared secret for the relay and the downloads")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    store = ChunkStore()
    relay = RelayServer(store, args.host, args.port, throttle=Throttle(args.cap_bytes_s, latency_s=args.latency_s),
                        token=args.token).start()
    # one client for the node's life: building one per fetch costs tens of milliseconds (TLS
    # context, lazy imports), which would be counted as broadcast time; warm it up on our own relay
    http = httpx.Client(limits=httpx.Limits(max_connections=32))
    http.get(f"{relay.url}/v1/broadcast/status", headers={"X-Echo2-Token": args.token} if args.token else {})

    def say(message: dict[str, Any]) -> None:
        print(json.dumps(message), flush=True)

    say({"event": "ready", "url": relay.url})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                if command.get("cmd") == "exit":
                    break
                say(handle(command, store, args.token, http))
            except Exception as error:  # noqa: BLE001 - reported to the driver, the node keeps serving
                say({"event": "error", "message": f"{type(error).__name__}: {error}"})
    finally:
        store.close()
        http.close()
        relay.stop(timeout_s=2.0)


if __name__ == "__main__":
    main()
