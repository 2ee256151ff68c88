"""Peer-assisted pipelined broadcast vs star: time to deliver M bytes to N receivers over capped uplinks.

    python bench/broadcast.py [--quick] [--out DIR] [--cap-mib-s B] [--chunk-kib C] [--sizes-mib M ...]
                              [--receivers N ...] [--latency-ms L]

Every node is a separate OS process (``bench/broadcast_node.py``) on loopback: one root
source (the learner's role) and up to max(N) receivers, each running a relay and the downloader.
Every node's upload, the root's included, is capped at the same ``B`` (downloads are not
capped: the uplink is the bottleneck being studied). Rows: payload ``M``, receivers ``N``, mode

* ``star`` — everyone fetches from the root, which must send ``N * M`` bytes;
* ``pipelined`` — a chain (``plan_tree(fan_out=1)``): each receiver relays every verified chunk
  to the next while it receives the following one,

``seconds`` until the last receiver holds the full payload with every chunk and the whole
verified, and ``ratio_to_bound`` = seconds / (M / B), the lower bound for any scheme (every byte
must leave the root once). Expected: star ≈ N, pipelined ≈ 1 + (N - 1) * chunk / M.

``B`` is kept low (8 MiB/s) so that even a 16-node chain (every node sending and receiving at
``B``) stays far below what two CPU cores can move through Python HTTP. The full run takes
about 25 minutes (the star rows dominate: sum(N) * M / B); ``--quick`` takes ~15 s.

``--lab`` (root) runs every node on its own host of the network lab (:mod:`echo2.lab`, docs/wan.md)
instead: no cap in echo2's code, each host's link shaped by the kernel to ``--link-mbps`` both ways
(real TCP on a narrow bottleneck), and ``--nat K`` more hosts behind NAT. Its extra row,
``pipelined+nat``, sends the payload to max(N) receivers of which K are behind NAT (their relays
unreachable: leaves of the plan, fed by the reachable relays); ``root_sent_mib`` is what the
learner's uplink carried.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import common  # noqa: E402
from common import format_table, write_results  # noqa: E402

from echo2.broadcast.topology import LEARNER, Node, plan_tree, star_plan  # noqa: E402
from echo2.lab import HostSpec, Lab  # noqa: E402
from echo2.units import MIB  # noqa: E402


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cap-mib-s", type=float, default=8.0, help="upload cap B of every node (MiB/s)")
    parser.add_argument("--chunk-kib", type=int, default=None, help="chunk size (default 1024; quick, lab 256)")
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=None, help="payloads M (default 64 256)")
    parser.add_argument("--receivers", type=int, nargs="+", default=None, help="N values (default 1 2 4 8 16)")
    parser.add_argument("--modes", nargs="+", default=["star", "pipelined"], choices=["star", "pipelined"])
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added delay per response")
    parser.add_argument("--in-flight", type=int, default=2, help="concurrent chunk requests per receiver")
    parser.add_argument("--lab", action="store_true", help="nodes on network-lab hosts, links shaped by the "
                                                            "kernel (root; docs/wan.md)")
    parser.add_argument("--link-mbps", type=float, default=50.0, help="with --lab: every host's link, both ways")
    parser.add_argument("--nat", type=int, default=4, help="with --lab: hosts behind NAT in the pipelined+nat row")


def parse_args() -> argparse.Namespace:
    args = common.parse_args(__doc__.splitlines()[0], "bench/out/broadcast", _options)
    # each hop of the chain delays the last receiver by at least chunk / B: with 1 MiB chunks on the
    # lab's 50 Mbit/s links 0.17 s a hop, (N - 1) * 0.17 = 1.2 s of a 10.7 s M/B at N = 8 (more with two
    # chunks in flight sharing the link); 256 KiB chunks a quarter of that
    args.chunk_kib = args.chunk_kib or (256 if args.quick or args.lab else 1024)
    args.sizes_mib = args.sizes_mib or ([4] if args.quick else [64] if args.lab else [64, 256])
    default_receivers = [2, 4, 8] if args.lab else [1, 2, 4, 8, 16]
    args.receivers = sorted(args.receivers or ([1, 2, 4] if args.quick else default_receivers))
    if args.lab:
        args.cap_mib_s = args.link_mbps * 1e6 / 8 / MIB  # the bound's B: the kernel's rate
        args.nat = min(args.nat, max(args.receivers) // 2)  # half of the largest N at most: relays remain
    return args


class NodeProcess:
    """One ``bench/broadcast_node.py`` process, spoken to in JSON lines; its stderr goes to a log file."""

    def __init__(self, name: str, cap_bytes_s: float | None, latency_s: float, log_dir: Path,
                 lab: Lab | None = None) -> None:
        """``lab``: run on the lab host ``name``, bound to its own address, uncapped (the kernel shapes it)."""
        self.name = name
        self._log = open(log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed in close()
        command = [sys.executable, str(Path(__file__).with_name("broadcast_node.py")), "--latency-s", str(latency_s)]
        command += ["--cap-bytes-s", str(cap_bytes_s)] if cap_bytes_s else []
        command += ["--host", lab.own_address(name)] if lab else []
        self.process = (lab.popen if lab else lambda _, argv, **kw: subprocess.Popen(argv, **kw))(
            name, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ""

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(json.loads(line))
        self._lines.put({"event": "error", "message": f"node {self.name} exited ({self.process.wait()})"})

    def send(self, command: dict[str, Any]) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def expect(self, event: str, timeout_s: float) -> dict[str, Any]:
        try:
            message = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"node {self.name}: no {event!r} within {timeout_s:.0f}s") from None
        if message.get("event") != event:
            raise RuntimeError(f"node {self.name}: expected {event!r}, got {message}")
        return message

    def close(self) -> None:
        try:
            self.send({"cmd": "exit"})
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def run_one(root: NodeProcess, receivers: list[NodeProcess], version: int, payload: dict[str, Any], mode: str,
            args: argparse.Namespace) -> dict[str, Any]:
    """Publish ``payload`` (node publish options: ``payload_bytes`` + ``seed``, or ``payload_path``) on
    ``root`` as ``version`` and time its delivery to every receiver (``args``: cap, chunk, in-flight)."""
    cap = args.cap_mib_s * MIB
    root.send({"cmd": "publish", "version": version, "chunk_size": args.chunk_kib * 1024, **payload})
    published = root.expect("published", 120)
    # a receiver behind NAT (lab hosts n*) can fetch but not serve: a leaf of the plan
    nodes = [Node(f"r{i}", cap, reachable=not proc.name.startswith("n")) for i, proc in enumerate(receivers)]
    plan = star_plan(nodes) if mode == "star" else plan_tree(nodes, fan_out=1)
    url = {LEARNER: root.url, **{node.id: proc.url for node, proc in zip(nodes, receivers)}}
    bound = published["total_bytes"] / cap
    stall_s = max(10.0, 4 * args.chunk_kib * 1024 / cap)
    started = time.time()
    for node, proc in zip(nodes, receivers):
        proc.send({"cmd": "fetch", "version": version, "sources": [url[s] for s in plan[node.id]],
                   "timeout_s": 5 * len(nodes) * bound + 60, "stall_s": stall_s, "in_flight": args.in_flight})
    results = [proc.expect("fetched", 5 * len(nodes) * bound + 90) for proc in receivers]
    seconds = max(r["done_at"] for r in results) - started
    for proc in receivers + [root]:
        proc.send({"cmd": "drop", "version": version})
        proc.expect("dropped", 30)
    from_root = sum(r["bytes_by_source"].get(root.url, 0) for r in results)
    return {
        "N": len(receivers), "mode": mode + ("+nat" if any(not n.reachable for n in nodes) else ""),
        "behind_nat": sum(not n.reachable for n in nodes), "seconds": seconds, "bound_s": bound,
        "ratio_to_bound": seconds / bound, "mean_receiver_s": sum(r["seconds"] for r in results) / len(results),
        "root_sent_mib": from_root / MIB, "chunk_kib": args.chunk_kib, "cap_mib_s": args.cap_mib_s,
        "failovers": sum(len(r["failovers"]) for r in results),
        "verified": all(r["sha256"] == published["sha256"] for r in results),
    }


def main() -> None:
    args = parse_args()
    (args.out / "nodes").mkdir(parents=True, exist_ok=True)
    public, private = [f"r{i}" for i in range(max(args.receivers))], [f"n{i}" for i in range(args.nat if args.lab else 0)]
    lab = Lab([HostSpec(name, args.link_mbps, args.link_mbps, nat=name in private)
               for name in ["root", *public, *private]]) if args.lab else None
    with lab or nullcontext():
        rows = measure(args, lab, public, private)
    columns = ["M_mib", "N", "mode", "behind_nat", "seconds", "bound_s", "ratio_to_bound", "mean_receiver_s",
               "root_sent_mib", "failovers", "verified"]
    where = (f"lab hosts, every link shaped by the kernel to {args.link_mbps:g} Mbit/s both ways" if lab else
             f"every node's upload capped at B = {args.cap_mib_s:g} MiB/s")
    print(f"\n{where}; chunk {args.chunk_kib} KiB; bound = M / B")
    print(format_table(rows, columns))
    meta = {"quick": args.quick, "cap_mib_s": args.cap_mib_s, "chunk_kib": args.chunk_kib,
            "latency_ms": args.latency_ms, "in_flight": args.in_flight, "lab": args.lab,
            "link_mbps": args.link_mbps if args.lab else None}
    path = write_results(args.out, rows, meta, models=())  # random payloads, no model
    plot(rows, args.out)
    print(f"\nwrote {path} and {args.out / 'broadcast.png'}")


def measure(args: argparse.Namespace, lab: Lab | None, public: list[str], private: list[str]) -> list[dict]:
    """Every row: each payload to each N in each mode (and, with NAT hosts, the pipelined+nat row)."""
    cap = None if lab else args.cap_mib_s * MIB
    nodes = {name: NodeProcess(name, cap, args.latency_ms / 1000, args.out / "nodes", lab)
             for name in ["root", *public, *private]}
    rows, version = [], 0
    try:
        for node in nodes.values():
            node.url = node.expect("ready", 60)["url"]
        receivers = [nodes[name] for name in public]
        runs = [(n, mode, receivers[:n]) for n in args.receivers for mode in args.modes]
        if private:  # the largest N, its last K hosts behind NAT
            n = max(args.receivers)
            runs.append((n, "pipelined", receivers[: n - len(private)] + [nodes[name] for name in private]))
        for payload_mib in args.sizes_mib:
            for n, mode, chosen in runs:
                version += 1
                row = {"M_mib": payload_mib, **run_one(nodes["root"], chosen, version,
                                                        {"payload_bytes": payload_mib * MIB, "seed": version},
                                                        mode, args)}
                print(f"== M={payload_mib} MiB N={n} {row['mode']}: {row['seconds']:.2f}s "
                      f"({row['ratio_to_bound']:.2f}x M/B, root sent {row['root_sent_mib']:.1f} MiB)", flush=True)
                rows.append(row)
    finally:
        for node in nodes.values():
            node.close()
    return rows


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["M_mib"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        subset = [r for r in rows if r["M_mib"] == size]
        for mode, style in (("star", "o-"), ("pipelined", "s-")):
            points = sorted((r["N"], r["seconds"]) for r in subset if r["mode"] == mode)
            if points:
                ax.plot(*zip(*points), style, label=mode)
        for row in (r for r in subset if r["mode"].endswith("+nat")):
            ax.plot([row["N"]], [row["seconds"]], "rx", markersize=10,
                    label=f"pipelined, {row['behind_nat']} behind NAT (root sent {row['root_sent_mib'] / size:.2f} M)")
        ns = sorted({r["N"] for r in subset})
        ax.plot(ns, [subset[0]["bound_s"]] * len(ns), "k--", label="M / B (lower bound)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("receivers N")
        ax.set_ylabel("seconds until the last receiver has verified M")
        ax.set_title(f"M = {size} MiB, every uplink B = {subset[0]['cap_mib_s']:g} MiB/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "broadcast.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
