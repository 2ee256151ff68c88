"""Attacks: misbehaving worker processes against a real run. Is each one stopped, how fast, and what gets trained?

    python bench/attacks.py [--quick] [--out DIR]

Real ``echo2 train`` runs of the shipped tiny model (default config, made small: 8 groups per
step, 4 per lease, S = 1, two honest local workers from ``workers.count``, cost-aware activation
off: the bench measures the defences, and an attacker parked for being the slowest worker would
never make its attack, while a clean run's fleet would vary with which worker the activation
kept on). Every attacker is a
separate process started here (``python bench/attacks.py --attacker ...``) that joins the run
with the run token, as anyone invited to it could. It uses echo2's own code: a
:class:`~echo2.rollout.client.CoordinatorClient` driven by hand (protocol attackers), or a
:class:`~echo2.rollout.worker.RolloutWorker` subclass that samples with the real engine and then
misbehaves (engine attackers). Each attacker has its own worker name (``attacker-<kind>``).
Independent attacks share a run. Every run has the same seed and, but for row 1b's, the same
length as the **clean** run, which has no attackers. Rows:

 1. ``fabricate``: invented completions (half of them the right answer, computed from the prompt)
    with invented log-probs (-0.05 a token), claiming the version it leased at;
 1b. ``late_cheater`` (full only, alone in its run): samples honestly for its first 64 accepted
    groups, long enough that its audit rate has decayed below 1, then fabricates as in row 1.
    Its run is three times as long as the others, so that it gets there. One run is one draw;
    ``how`` also gives the expected number of fabricated groups that get in at the measured rate;
 2. ``fabricate_old``: as in row 1, but it holds each lease until the learner has published the
    next version, so each submission claims v - 1 (inside the S = 1 window);
 3. ``reward`` (engine): every submission is first sent with a ``reward`` field of 1.0 in each
    completion and then with a top-level ``rewards`` list (both must be refused with 422), then
    sent as it should be. Every trained group's rewards are checked against the task's verifier
    applied again to its tokens;
 4. ``replay``: copies the submissions of an honest worker (``honest-tap``, a real
    ``RolloutWorker`` in the attacker's process, standing for traffic the attacker can read or
    a worker it colludes with). Each copy is sent verbatim (another worker's lease, 404), under
    the attacker's own lease with the honest slots (422), and then moved onto its own lease's
    slots (accepted, then audited);
 5. ``duplicate`` (engine): each lease is submitted twice at once and a third time after the
    first two, so one copy arrives while another is still being scored and one after the
    lease is done;
 6. ``late_lease``: holds a lease past its deadline (``coordinator.lease_timeout_s=8`` in that
    run) and submits 2.5 s late, twice (409 expected). A third probe submits only 0.2 s past
    the deadline and is reported but not scored here: a lease expires when the coordinator
    reaps it, not at its deadline;
 7. ``relay``: registers a fake relay (its URL, answering the coordinator's reachability check as
    itself, declared and heartbeated upload 1e12 B/s, so the planner puts it at the head of every
    chain). For even versions it serves a substituted
    manifest and chunks: the real payload with the low byte of every float flipped, which makes
    a self-consistent manifest of other weights. For odd versions it serves the real manifest
    with one bit flipped in every chunk. Evidence comes from the peers' logs (workers' and
    engine attackers'): failovers away from the fake relay, no chunk credited to it, and no
    honest worker quarantined. A worker that loaded other weights would fail its probation
    audits, and every load is sha256-checked;
 8. ``oversize``: raw sockets to the coordinator and to a peer's relay. A 64 MiB
    ``Content-Length`` with no credential (401) and with one (413), both answered before a body
    byte is sent. A chunked 64 MiB body with no credential (401) and with one (413 once the
    limit is passed). On the relay: no credential (401), or the broadcast credential with a 4 KiB
    body (413);
 9. ``flood``: 200 registrations with the run token, 8 at a time. Half of them name a relay
    URL on a closed loopback port and declare 1e12 B/s, a Sybil attack on the relay plan (those
    relays never answer the coordinator's reachability check, so none enters it). None of them
    ever heartbeats. Expected: past the per-address allowance
    (``limits.registrations_burst``, then ``registrations_per_minute``) each is answered 429;
10. ``slowloris``: 50 connections to the coordinator that dribble their headers at one byte a
    second, 50 with a session credential that dribble a body, and 50 that dribble headers to a
    peer's relay. Expected: each is answered 408 and closed, heads after
    ``limits.head_timeout_s`` (10 s; relays the same), bodies after
    ``limits.body_timeout_s`` (30 s in that run, so that the deadline falls well inside
    it). Only closes that happen before the learner's last step count: when the servers stop
    at the end of the run they close everything anyway;
11. ``sybil_fabricate`` (full only): 8 identities in one process, one every 3 s, each fabricating
    as in row 1 until it is quarantined. Spaced so that each one's groups share a batch with
    honest groups: the learner cuts them from the batch and tops it up from the buffer, so every
    step still trains B groups. (A step that trained fewer would leave the lease window, which
    counts B groups per step, that much wider for the rest of the run: more slots granted at
    older versions, then dropped as stale.) The row counts groups dropped as stale against the
    clean run.

12. ``poison_logprob`` (engine, full only): samples honestly for 12 accepted groups (in a run whose
    probation is 4 groups and audit decay 0.5, so that its audit rate is near the floor by then),
    then submits each lease once with one token's behaviour log-prob at -1000 (below the protocol's
    floor: 422 expected) and once at -45 (inside it, ~40 nats from the policy's): the learner must
    leave that row out of its step or fail its audit, quarantine the worker, and publish only finite
    versions. ``how`` counts the poisoned groups that reached a batch and the rows left out;
13. ``hoarder`` (full only, alone in its run, ``coordinator.lease_timeout_s=8``): asks for 4096
    groups in every lease request and never submits. Expected: one group a lease while it has
    delivered nothing (its trial), parked from its first miss, and the run's steps/s (over the
    whole run: ``run_s_per_step_vs_clean`` at most 1/0.8) within 20% of those of ``hoard-clean``, a
    run of the same settings without it played just before (``step_s_vs_clean``: the median step);
14. ``telemetry``: heartbeats with NaN, +inf and -inf times, an interval that ends before it
    starts, an infinite upload rate (422 each); registrations named with a newline and a forged
    log line, ``learner`` and markup (422 each); and a second ``local-0`` (an honest worker's
    name), which must be renamed ``local-0#N``. No forged line may reach ``train.log``. Then finite
    but absurd numbers: times of 1e308 and an upload rate of 1e300 (422), a held or fetched version of
    10**30 (409, newer than any published);
15. ``resume_claim`` (full only, alone in its run, which stops halfway and continues with
    ``--resume``): waits for the open ``/v1/health`` to go silent and answer again, registers at
    once and fabricates as in row 1, but every lease and submission claims the version before the
    newest: right after the restart, the one before the version resumed at, which an audit could
    not check before the window's versions travelled with the checkpoint. Expected: audited at that
    version and quarantined, **0 groups trained unaudited after the resume**
    (``trained_unaudited_after_resume``: its trained groups that no audit re-scored), and the
    groups drawn for an audit whose version was lost (``groups_unauditable``, left out) counted.
25-27. ``chooser``, ``repeater``, ``cherry_picker`` (engine, one run): real samples of the policy
    with their true log-probs, chosen rather than drawn from the lease's randomness: drawn from
    randomness of its own, one group's first completion G times, the G shortest of 2G tries.
    Only the draw check (:mod:`echo2.model.draws`) tells them from honest samples.

Availability rows (``--availability``; ``bench/availability_rows.py``), each alone in its run with
a heartbeat probe (an identity that only heartbeats, twice a second, timing each answer), against
``avail-clean``, a run of the same settings with the probe alone, played just before. Each attack
lasts ``AVAILABILITY_S`` from when training begins. These attackers run at nice 19: in a real
fleet they are remote, and on this one machine an attacker process spending the cores on its own
requests would slow the learner whatever the coordinator does:

16. ``trickle_relay``: a relay that answers the reachability check, declares 1e12 B/s, serves the
    real manifest and then one byte of a chunk every half second;
17. ``silent_relay``: the same, but it never sends a chunk's first byte;
18. ``recycled_hoarders`` (5): identities that hold a one-group lease until the learner has moved
    S + 2 versions past it, then submit fabricated completions, and ask again;
19. ``hoarding_swarm`` (64, 256): identities registered at once that hold the lease they get and
    ask again at once, never submitting;
20. ``fabricating_swarm`` (64): the same, but each lease is answered with fabricated completions;
21. ``longpoll_flood``: one identity keeping 100 lease requests open at once;
22. ``heartbeat_flood``: one identity's heartbeats, as fast as 8 threads send them;
23. ``events_flood``: one identity's heartbeats of 1000 timeline events each;
24. ``wide_interval``: one ``generate`` interval from 86,000 s ago to 86,000 s ahead.

Agent rows (``--agents``), each in an agent run of the shipped model against ``agent-clean``
(:data:`AGENT_RUN`: one completions call per episode through the gateway):

28. ``call_flood``: the run token's holder claims one episode and keeps 100 calls on its key open
    at once, again and again, never rewarding it (measured as an availability row);
29. ``call_chooser``: a worker of the fleet that answers the agents' calls with samples of its own
    randomness (true log-probs). Expected: quarantined, none of its answers handed to an agent
    after the catch (``calls_answered_after``), no group with one of its turns trained.

Rows 8 and 10 need a peer's relay URL. They take the first source in their own version info
when the plan puts them below a relay; otherwise they read one from the run's train.log.
Relay URLs are no secret (the plan hands each worker its parent's), but only the first worker
without a relay of its own gets a relay parent.

Columns. ``detected``: refused at the door or quarantined, in the way the row expects (rows 9
and 10 say ``no`` when nothing was refused or closed, and then ``how`` says whether the run
absorbed it; a row whose attacker never got to send a malicious submission says ``not
attempted``). ``seconds_to_quarantine``: the attacker's first accepted malicious submission to
its quarantine. ``groups_to_quarantine``: malicious groups the coordinator accepted from it
(none can be accepted after). ``attacker_groups_trained``: the attacker's groups the learner
trained on. For audit rows these are its malicious groups trained before the quarantine; for
rows 3 and 5 they are its legitimate groups. ``attacker_groups_trained_after`` is what got past
the defence and must be 0: for audit rows, the attacker's groups trained after its quarantine;
for rows 3, 5 and 6, trained groups with a reward other than the verifier's, slots trained
twice, or slots of refused late submissions. ``final_accuracy``: held-out greedy accuracy at
the end of the row's run (a shared run shares it); ``clean_accuracy``: the same for the clean
run; ``step_s_vs_clean``: the median step time over the clean run's.

How trained groups are attributed. The run directory records quarantines (train.log's
``quarantined worker NAME`` line, ``reliability.json``'s ``workers_quarantined`` and
``groups_discarded_quarantined``) and per-worker throughput, but not which worker each trained
group came from. So the bench, which runs ``run_training`` in its own process as
``bench/chaos.py`` does, wraps seven methods there, changing what they do for the probe only:
``LearnerLoop._batch`` logs the worker id, slot, version and rewards of every group handed to
the optimizer (and recomputes the verifier's rewards for them); ``CoordinatorState.quarantine``
logs when each worker was quarantined; ``WorkDesk.submit`` logs each accepted submission;
``Verifier._gaps`` logs every group an audit re-scored; ``EpisodeBook.record`` logs every agent
call a worker answered, and which; ``Membership.register`` marks the heartbeat probe as a worker
that has delivered (it times what a delivering worker's heartbeats take under the attack: a
newcomer's share the newcomers' budget, :data:`echo2.coordinator.app.NEWCOMERS_REQUESTS`);
``CoordinatorState.__init__`` keeps the
state (two in a resumed run) so that worker names and refusal counts can be read at the end.
Each attacker also writes its own log (``RUN/attackers/NAME.jsonl``) of what it sent and what was
answered: slots, versions, statuses.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from attack_rows import make_row, plot
from attack_runs import AVAILABILITY_KINDS, OBSERVER, ROWS, Attack, Outcome, attack, run_once
from attackers.run import attacker_main
from attackers.service import chosen_worker
from availability_rows import availability_row, plot_availability, probe_max_s
from common import format_table, parse_args, write_results
from service_rows import service_rows

#: learner steps of a full run (times its ``LENGTH``)
FULL_STEPS = 300
#: run name -> (its attacks, its extra overrides). Every plan also has a clean run.
QUICK_PLAN = {"attacks": ([attack("fabricate"), attack("fabricate_old"), attack("duplicate"), attack("oversize"),
                           attack("telemetry")], [])}
FULL_PLAN = {
    "audit": ([attack("fabricate"), attack("fabricate_old"), attack("replay")], []),
    # alone: its audit rate then follows its own groups only, and no other attacker's quarantine
    # shares its batches
    "late": ([attack("late_cheater", honest_groups=64)], []),
    # full versions only: the fake relay serves substitutes of those (a delta is verified the same way,
    # by the sha256 of the version it rebuilds, but the fake relay has no delta routes: peers would
    # just fail over on its 404s)
    "door": ([attack("reward"), attack("duplicate"), attack("late_lease"), attack("oversize"), attack("relay")],
             ["coordinator.lease_timeout_s=8", "broadcast.encoding=full"]),
    "flood": ([attack("flood")], []),
    "slowloris": ([attack("slowloris")], ["limits.body_timeout_s=30"]),
    "amplify": ([attack("sybil_fabricate", count=8, spacing_s=3.0)], []),
    # its own run: its step-time cost is the row's measure, against a clean run of the same settings
    # just before it (REFERENCE: the machine's speed drifts over the bench's twenty minutes)
    "hoard-clean": ([], ["coordinator.lease_timeout_s=8"]),
    "hoard": ([attack("hoarder")], ["coordinator.lease_timeout_s=8"]),
    # probation shortened and its decay steepened in this run, so that the poisoner is past its
    # probation and rarely audited within the run's length (the hole: a group no audit looked at)
    "trust": ([attack("poison_logprob", honest_groups=12), attack("telemetry")],
              ["verification.probation_groups=4", "verification.audit_decay=0.5"]),
    # stopped halfway and resumed: the claim targets the restart
    "resume": ([attack("resume_claim")], []),
    # real samples with true log-probs, chosen rather than drawn: only the draw check catches them
    "draws": ([attack("chooser"), attack("repeater"), attack("cherry_picker")], []),
}
#: Seconds each availability attack lasts (from when training begins), and each availability
#: run's steps: long enough to outlast it (a clean run makes about 6 steps a second here).
AVAILABILITY_S = 90.0
AVAILABILITY_STEPS = 700
AVAILABILITY_PLAN = {
    "avail-clean": ([attack("probe")], []),
    "trickle": ([attack("trickle_relay", duration_s=AVAILABILITY_S), attack("probe")], []),
    "silent": ([attack("silent_relay", duration_s=AVAILABILITY_S), attack("probe")], []),
    "recycled": ([attack("recycled_hoarders", count=5, duration_s=AVAILABILITY_S), attack("probe")], []),
    "swarm64": ([attack("hoarding_swarm", count=64, duration_s=AVAILABILITY_S), attack("probe")], []),
    "swarm256": ([attack("hoarding_swarm", count=256, duration_s=AVAILABILITY_S), attack("probe")], []),
    "fabswarm64": ([attack("fabricating_swarm", count=64, duration_s=AVAILABILITY_S), attack("probe")], []),
    "longpolls": ([attack("longpoll_flood", duration_s=AVAILABILITY_S), attack("probe")], []),
    "heartbeats": ([attack("heartbeat_flood", duration_s=AVAILABILITY_S), attack("probe")], []),
    "events": ([attack("events_flood", duration_s=AVAILABILITY_S), attack("probe")], []),
    "wide": ([attack("wide_interval", duration_s=AVAILABILITY_S), attack("probe")], []),
    # the two rows of the previous round never replayed: every one of 256 identities let in (the
    # per-address allowance raised past them), and a relay trickling for 400 s (the run four times as long)
    "swarm256-open": ([attack("hoarding_swarm", count=256, duration_s=AVAILABILITY_S), attack("probe")],
                      ["limits.registrations_burst=300", "limits.registrations_per_minute=600"]),
    "trickle400": ([attack("trickle_relay", duration_s=400.0), attack("probe")], []),
}
#: An agent run of the shipped model (``--agents``): one completions call per episode through the
#: gateway (:mod:`attackers.text_agent`), against which a call flood (row 28) is measured.
AGENT_RUN = ["task.name=agent:attackers.text_agent:play", "agent.examples=arithmetic", "agent.concurrency=16",
             "rollout.group_size=4"]
#: An agent run's steps: about 0.8 a second here (a group's four episodes each a gateway call), so
#: 150 steps outlast the 90 s flood.
AGENT_STEPS = 150
AGENT_PLAN = {
    "agent-clean": ([attack("probe")], AGENT_RUN),
    "agent-flood": ([attack("call_flood", duration_s=AVAILABILITY_S), attack("probe")], AGENT_RUN),
    "agent-chooser": ([attack("call_chooser")], AGENT_RUN),
}
#: run name -> how many times the plan's steps it trains (1 when absent). ``late`` three times: a
#: third sampler on two cores gets ~2.5% of the leases, 60 groups in 300 steps, short of the 64
#: honest ones it must deliver before it cheats
LENGTH = {"late": 3, "trickle400": 4}
#: run name -> the run its step times are compared with (``clean`` when absent)
REFERENCE = {"hoard": "hoard-clean", **{name: "avail-clean" for name in AVAILABILITY_PLAN},
             **{name: "agent-clean" for name in AGENT_PLAN}}
#: run name -> the share of its steps after which the learner stops and resumes (``--resume``)
RESTART = {"resume": 0.5}


def availability_row_of(spec: Attack, run: Outcome, clean: Outcome, probe: Attack | None) -> dict:
    """An availability row in the table's shape (``make_row``'s common columns)."""
    return {"attack": spec.row, "kind": spec.kind, "run": run.name, **availability_row(run, spec, clean, probe),
            "final_accuracy": run.final_accuracy, "clean_accuracy": clean.final_accuracy,
            "step_s_vs_clean": run.step_s / clean.step_s, "steps": run.steps}


def service_main(args) -> None:
    """The training service's rows (``--service``: :mod:`service_rows`)."""
    started = time.time()
    rows, meta = service_rows(args.out, args.quick)
    columns = ["attack", "detected", "seconds_to_quarantine", "chosen_returned_after", "how"]
    print(f"\necho2 serve, the shipped model, 2 local workers; the honest client: {meta['honest_answered']} of "
          f"{meta['honest_asked']} requests answered, {meta['workers_alive_at_end']} local workers alive at the end")
    print(format_table(rows, columns))
    path = write_results(args.out, rows, {**meta, "quick": args.quick, "wall_s": time.time() - started})
    print(f"\nwrote {path} ({time.time() - started:.0f}s)")


def main() -> None:
    if sys.argv[1:2] == ["--attacker"]:
        attacker_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--service-worker"]:
        worker = argparse.ArgumentParser()
        worker.add_argument("kind")
        worker.add_argument("--coordinator", required=True)
        worker.add_argument("--name", required=True)
        chosen = worker.parse_args(sys.argv[2:])
        chosen_worker(chosen.kind, chosen.coordinator, os.environ["ECHO2_TOKEN"], chosen.name)
        return
    def options(parser) -> None:
        parser.add_argument("--availability", action="store_true", help="the availability rows (16-24) only, with "
                            "their clean run")
        parser.add_argument("--service", action="store_true", help="the training service's rows (S1-S9): an "
                            "echo2 serve under attack")
        parser.add_argument("--agents", action="store_true", help="the gateway's rows (28): an agent run's calls "
                            "flooded, against a clean agent run")
        parser.add_argument("--runs", help="comma-separated names of the plan's runs to play (default: all)")

    args = parse_args(__doc__.splitlines()[0], "bench/out/attacks", options)
    if args.service:
        service_main(args)
        return
    availability = args.availability or args.agents  # rows measured as availability: steps/s, heartbeats
    steps = AGENT_STEPS if args.agents else AVAILABILITY_STEPS if availability else 60 if args.quick else FULL_STEPS
    plan = (AGENT_PLAN if args.agents else AVAILABILITY_PLAN if args.availability else QUICK_PLAN if args.quick
            else FULL_PLAN)
    if args.runs:
        wanted = args.runs.split(",")
        plan = {name: plan[name] for name in plan if name in wanted or name in ("avail-clean", "agent-clean")}
    started = time.time()
    OBSERVER.install()
    rows, runs = [], {}
    if not availability:
        runs["clean"] = run_once("clean", [], steps, args.out, [])
    for name, (attacks, extra) in plan.items():
        length = steps * LENGTH.get(name, 1)
        restart_at = int(length * RESTART[name]) if name in RESTART else None
        run = runs[name] = run_once(name, attacks, length, args.out, extra, restart_at)
        reference = runs[REFERENCE.get(name, "clean")]
        probe = next((spec for spec in attacks if spec.kind == "probe"), None)
        rows += [availability_row_of(spec, run, reference, probe) if spec.kind in AVAILABILITY_KINDS
                 else make_row(spec, run, reference) for spec in attacks if spec.kind != "probe"]
    clean = runs.get("clean") or runs.get("avail-clean") or runs["agent-clean"]
    order = list(ROWS)
    rows.sort(key=lambda r: order.index(r["kind"]))
    columns = (["attack", "run", "detected", "steps_per_s_vs_clean", "first_minute_vs_clean", "heartbeat_max_s",
                "attacker_groups_trained_after", "honest_quarantined", "honest_parked_at_end", "final_accuracy",
                "how"] if availability else
               ["attack", "run", "detected", "seconds_to_quarantine", "groups_to_quarantine", "attacker_groups_trained",
                "attacker_groups_trained_after", "final_accuracy", "clean_accuracy", "step_s_vs_clean", "how"])
    lengths = f"{steps} steps per run" + ("" if args.quick or availability or "late" not in runs
                                          else f" ({runs['late'].steps} in row 1b's)")
    clean_probe = next((spec for spec in clean.attacks if spec.kind == "probe"), None)
    clean_beats = probe_max_s(clean, clean_probe, float("-inf"), float("inf"))
    print(f"\n{lengths}, 8 groups/step, S=1, 2 honest local workers; clean run: "
          f"{clean.step_s:.2f} s/step, accuracy {clean.final_accuracy:.2f}"
          + (f", its own heartbeats at most {clean_beats:.2f} s" if clean_beats is not None else ""))
    print(format_table(rows, columns))
    meta = {"quick": args.quick, "availability": availability, "agents": args.agents, "steps": steps, "clean_step_s": clean.step_s, "clean_accuracy": clean.final_accuracy,
            "clean_heartbeat_max_s": clean_beats, "clean_reliability": clean.reliability, "wall_s": time.time() - started,
            "runs": {name: {"attackers": [a.name for a in run.attacks], "step_s": run.step_s, "steps": run.steps,
                            "final_accuracy": run.final_accuracy, "reliability": run.reliability,
                            "groups_by_worker": run.per_worker(), "quarantines": run.quarantines}
                     for name, run in runs.items()}}
    path = write_results(args.out, rows, meta)
    if availability:
        plot_availability(rows, args.out)
    else:
        plot(rows, meta["runs"], args.out)
    figure = args.out / ("availability.png" if availability else "attacks.png")
    print(f"\nwrote {path} and {figure} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
