"""A rollout worker from ``echo2 worker``'s command-line options.

The command line and the Ray launcher (:mod:`echo2.launch.ray_actors`) build workers through
this one function, so a worker placed as a Ray actor is the very worker a user starts by hand.
"""

from __future__ import annotations

import argparse

from echo2.broadcast.publisher import mbps_to_bytes_per_s
from echo2.rollout.worker import RelayOptions, RolloutWorker


def worker_from_args(args: argparse.Namespace) -> RolloutWorker:
    relay = None if args.no_relay else RelayOptions(
        bind_host=args.relay_host, port=args.relay_port, advertise_host=args.advertise_host,
        upload_bytes_per_s=mbps_to_bytes_per_s(args.upload_mbps), latency_s=args.added_latency_ms / 1000)
    return RolloutWorker(args.coordinator, args.token, name=args.name, threads=args.threads,
                         give_up_after_s=args.give_up_after, relay=relay, price_per_hour=args.price_per_hour,
                         worker_class=args.worker_class, throughput_factor=args.throughput_factor,
                         falsify_rewards=args.falsify_rewards, device=args.device)
