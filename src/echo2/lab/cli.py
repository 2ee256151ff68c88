"""``echo2 lab up | exec | partition | heal | clean``: rehearse a wide-area run on one Linux box.

``up`` builds the hosts and holds them until Ctrl-C (or SIGTERM), writing what it built to
``STATE_DIR/echo2-lab-ID.json`` so that the other verbs, from other shells, can find it. No
secret is in it: the lab is addresses and rates.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from echo2.lab.commands import LabError, LabUnavailable, remove
from echo2.lab.hosts import HostSpec
from echo2.lab.network import Lab

STATE_DIR = Path(tempfile.gettempdir())


def _state_path(lab_id: str) -> Path:
    return STATE_DIR / f"echo2-lab-{lab_id}.json"


def _attach(lab_id: str) -> Lab:
    """The lab ``echo2 lab up`` built under ``lab_id`` (not rebuilt: only its names and addresses)."""
    path = _state_path(lab_id)
    if not path.exists():
        raise LabError(f"no lab {lab_id!r} is up (no {path}; `echo2 lab up` prints the id)")
    hosts = json.loads(path.read_text())["hosts"]
    return Lab([HostSpec(name, h["up_mbps"], h["down_mbps"], h["nat"]) for name, h in hosts.items()], lab_id)


def _up(args: argparse.Namespace) -> int:
    lab = Lab([HostSpec.parse(text) for text in args.hosts])
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM tears down as Ctrl-C does
    with lab:
        _state_path(lab.id).write_text(json.dumps(lab.describe(), indent=1))
        try:
            print(f"lab {lab.id} is up (Ctrl-C tears it down):")
            for name, host in lab.describe()["hosts"].items():
                rates = f"up {host['up_mbps'] or '-'} / down {host['down_mbps'] or '-'} Mbit/s"
                seen = f"{host['address']} (behind NAT, own {host['own_address']})" if host["nat"] else host["address"]
                print(f"  {name:<12} {seen:<40} {rates}")
            print(f"run a command in a host:  echo2 lab exec {lab.id} HOST -- COMMAND...")
            print(f"cut a host off:           echo2 lab partition {lab.id} HOST [PEER] [--reject] [--for SECONDS]")
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"\ntearing lab {lab.id} down")
        finally:
            _state_path(lab.id).unlink(missing_ok=True)
    return 0


def _exec(args: argparse.Namespace) -> int:
    lab = _attach(args.lab)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise LabError("give the command to run after --")
    os.execvp("ip", lab.command(args.host, command))
    return 0  # not reached: exec replaced this process


def _partition(args: argparse.Namespace) -> int:
    lab = _attach(args.lab)
    partition = lab.partition(args.host, args.peer, mode="reject" if args.reject else "blackhole")
    print(f"partitioned: {partition.what}")
    if args.seconds is not None:
        time.sleep(args.seconds)
        partition.heal()
        print("healed")
    return 0


def _heal(args: argparse.Namespace) -> int:
    print(f"healed ({_attach(args.lab).heal_all()} rules removed)")
    return 0


def _clean(args: argparse.Namespace) -> int:
    removed = remove(args.prefix)
    print(f"removed {len(removed)} namespaces" + (f": {' '.join(removed)}" if removed else ""))
    return 0


def add_lab_parser(commands: argparse._SubParsersAction) -> None:
    lab = commands.add_parser("lab", help="hosts as network namespaces: shaped links, NAT, partitions (root)")
    verbs = lab.add_subparsers(dest="lab_verb", required=True)
    up = verbs.add_parser("up", help="build hosts and hold them until Ctrl-C")
    up.add_argument("hosts", nargs="+", metavar="NAME[:UP[:DOWN]][:nat]",
                    help="a host, its link in Mbit/s (DOWN defaults to UP) and whether it is behind NAT, "
                         "e.g. learner w1:50 w2:50:200:nat")
    up.set_defaults(handler=partial(guarded, _up))
    run = verbs.add_parser("exec", help="run a command inside a host")
    run.add_argument("lab", help="the id `echo2 lab up` printed")
    run.add_argument("host")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    run.set_defaults(handler=partial(guarded, _exec))
    cut = verbs.add_parser("partition", help="drop (or --reject) a host's packets, or a pair's")
    cut.add_argument("lab")
    cut.add_argument("host")
    cut.add_argument("peer", nargs="?", help="cut only between HOST and PEER")
    cut.add_argument("--reject", action="store_true", help="refuse (ICMP) instead of dropping silently")
    cut.add_argument("--for", dest="seconds", type=float, help="heal after this many seconds (default: "
                                                                "until `echo2 lab heal`)")
    cut.set_defaults(handler=partial(guarded, _partition))
    heal = verbs.add_parser("heal", help="lift every partition of a lab")
    heal.add_argument("lab")
    heal.set_defaults(handler=partial(guarded, _heal))
    clean = verbs.add_parser("clean", help="remove what crashed labs left behind")
    clean.add_argument("--prefix", default="e2lab-", help=argparse.SUPPRESS)
    clean.set_defaults(handler=partial(guarded, _clean))


def guarded(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A lab verb, its failures as one line on stderr (exit 2)."""
    try:
        return handler(args)
    except (LabError, LabUnavailable, KeyError, ValueError) as error:
        print(f"echo2 lab: {error}", file=sys.stderr)
        return 2
