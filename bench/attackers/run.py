"""One attacker process: ``python bench/attacks.py --attacker --kind KIND ...`` lands here."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from attack_runs import AVAILABILITY_KINDS, ENGINE_KINDS

from attackers.availability import (
    attack_bad_relay,
    attack_call_flood,
    attack_flood,
    attack_recycled_hoarders,
    attack_swarm,
    probe_heartbeats,
)
from attackers.engine import engine_attacker
from attackers.protocol import attack_fabricate, attack_late_lease, attack_replay, attack_sybil_fabricate
from attackers.relay import attack_relay
from attackers.service import chosen_worker
from attackers.session import TOKEN_ENV, EventLog, Session, wait_for_training
from attackers.trust import attack_hoarder, attack_resume_claim, attack_telemetry
from attackers.wire import attack_flood as attack_registrations
from attackers.wire import attack_oversize, attack_slowloris


def yield_the_cpu() -> None:
    """An availability attacker is remote in a real fleet: its own CPU is not the learner's
    machine's. Here it shares two cores with the learner and its workers, so it runs at nice 19 in
    an autogroup of its own (the bench starts it in a session of its own): the scheduler shares
    the CPU between autogroups first, and a nice-19 swarm of 256 threads inside the learner's
    autogroup still took two thirds of a core (6.7 CPU-s in 10 s) while the workers generated
    28% slower."""
    os.nice(19)
    try:
        Path("/proc/self/autogroup").write_text("19")
    except OSError:  # no autogroup scheduling here: the process nice is all there is
        pass


def attacker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="one attacker (started by bench/attacks.py)")
    parser.add_argument("--kind", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--params", default="{}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "uvicorn", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    token, url, name, params = os.environ[TOKEN_ENV], args.coordinator, args.name, json.loads(args.params)
    if args.kind in AVAILABILITY_KINDS:
        yield_the_cpu()
    log = EventLog(args.log)
    # the slow imports (torch, transformers) now, while the learner starts: the attack begins with training
    from echo2.rollout.client import CoordinatorUnreachable

    if args.kind in (*ENGINE_KINDS, "replay"):
        import echo2.rollout.worker  # noqa: F401
    if args.kind in ("fabricate", "fabricate_old", "late_lease", "sybil_fabricate", "resume_claim",
                     "recycled_hoarders", "fabricating_swarm"):
        from echo2.model.loading import load_tokenizer
    wait_for_training(args.run_dir)
    log.emit("start", kind=args.kind)
    try:
        if args.kind == "call_chooser":  # a worker of the fleet, behind the agents' calls
            chosen_worker("chooser", url, token, name, log)
        elif args.kind in ENGINE_KINDS:
            engine_attacker(args.kind, url, token, name, log, params)
        elif args.kind == "relay":
            attack_relay(url, token, name, log)
        elif args.kind == "flood":
            attack_registrations(url, token, log)
        elif args.kind in ("trickle_relay", "silent_relay"):
            attack_bad_relay(url, token, name, log, args.kind == "silent_relay", params["duration_s"],
                             params.get("bind_host", "127.0.0.1"), params.get("advertise_host"))
        elif args.kind == "recycled_hoarders":
            attack_recycled_hoarders(url, token, name, log, params["count"], params["duration_s"])
        elif args.kind in ("hoarding_swarm", "fabricating_swarm"):
            attack_swarm(url, token, name, log, params["count"], args.kind == "fabricating_swarm", params["duration_s"])
        elif args.kind in ("longpoll_flood", "heartbeat_flood", "events_flood", "wide_interval"):
            what = {"longpoll_flood": "longpolls", "heartbeat_flood": "heartbeats", "events_flood": "events"}
            attack_flood(url, token, name, log, what.get(args.kind, args.kind), params["duration_s"])
        elif args.kind == "call_flood":
            attack_call_flood(url, token, log, params["duration_s"])
        elif args.kind == "probe":
            probe_heartbeats(url, token, name, log)
        elif args.kind == "resume_claim":
            attack_resume_claim(url, token, name, log)
        elif args.kind == "sybil_fabricate":
            attack_sybil_fabricate(url, token, name, log, params["count"], params["spacing_s"])
        else:
            session = Session(url, token, name, log)
            if args.kind in ("fabricate", "fabricate_old", "late_lease"):
                tokenizer = load_tokenizer(session.spec.model)
                if args.kind == "late_lease":
                    attack_late_lease(session, tokenizer)
                else:
                    attack_fabricate(session, tokenizer, claim_older=args.kind == "fabricate_old")
            elif args.kind == "replay":
                attack_replay(session, url, token)
            elif args.kind == "oversize":
                attack_oversize(session, args.run_dir)
            elif args.kind == "slowloris":
                attack_slowloris(session, args.run_dir)
            elif args.kind == "hoarder":
                attack_hoarder(session)
            elif args.kind == "telemetry":
                attack_telemetry(session, url, token, log)
            else:
                raise ValueError(f"unknown attack kind {args.kind!r}")
    except CoordinatorUnreachable as error:  # the run is over and its coordinator gone
        log.emit("coordinator_gone", error=str(error)[:200])
    except Exception as error:
        log.emit("crashed", error=repr(error))
        raise
    finally:
        log.emit("done")
