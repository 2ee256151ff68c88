"""One row per attack, read from a finished run and the clean run; and the plot."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from attack_runs import AUDIT_KINDS, CHOOSING_KINDS, Attack, Outcome
from attackers.session import INVENTED_LOGPROB, MIB


def nothing_trained(run: Outcome, spec: Attack) -> dict[str, int]:
    """The two trained columns of an attacker that submits no group of its own: measured (every
    identity it registered, looked up among the trained groups), 0 unless the books are wrong."""
    ids = {e["worker_id"] for e in run.events(spec) if "worker_id" in e}
    ids.update(w for e in run.events(spec) for w in e.get("worker_ids", []))
    trained = sum(len(run.trained_by(wid)) for wid in ids)
    return {"attacker_groups_trained": trained, "attacker_groups_trained_after": trained}


def audit_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    wid = run.worker_id(spec)
    submitted = [e for e in run.events(spec, "submitted") if e.get("malicious") and e["accepted"]]
    slots = {s for e in submitted for s in e["slots"]}
    q = run.quarantine(wid)
    at = q["t"] if q else None
    trained = [g for g in run.trained_by(wid) if g["slot"] in slots]
    # when the coordinator accepted its first malicious group (its own log says when the reply arrived, later)
    start = min((a["t"] for a in run.accepted if a["worker_id"] == wid and slots & set(a["slots"])), default=None)
    logged = f"quarantined worker {spec.name}:" in run.train_log
    refused_after = [e for e in run.events(spec) if e.get("status") == 403
                     and e["event"] in ("after_quarantine", "lease_refused", "submit_refused")]
    row: dict[str, Any] = {
        "detected": "yes" if q is not None and logged else "no",
        "seconds_to_quarantine": at - start if at is not None and start is not None else None,
        "groups_to_quarantine": sum(e["accepted"] for e in submitted),
        "attacker_groups_trained": sum(1 for g in trained if at is None or g["t"] < at),
        "attacker_groups_trained_after": sum(1 for g in trained if at is not None and g["t"] >= at),
        "refused_403_after": len(refused_after),
        "quarantine_reason": q["reason"] if q else None,
    }
    gap = re.search(r"differ by ([0-9.]+) nats/token from v(\d+)'s.*tolerance ([0-9.]+)", q["reason"]) if q else None
    drawn = re.search(r"lies ([0-9.]+) outside the interval its draw picks under v(\d+) \(tolerance ([0-9.]+)\)",
                      q["reason"]) if q else None
    caught = (f"audit gap {gap.group(1)} nats/tok vs v{gap.group(2)} (tol {gap.group(3)})" if gap
              else f"draws: a token {drawn.group(1)} outside its interval at v{drawn.group(2)} (tol {drawn.group(3)})"
              if drawn else f"quarantined by the learner's step: {q['reason']}" if q else "never quarantined")
    if spec.kind == "fabricate_old":
        lags = [e["published"] - e["version"] for e in submitted]
        row["claimed_lag_max"] = max(lags, default=None)
        row["how"] = f"claimed v-{max(lags, default=0)}, audited at that version: {caught}; 403 after"
    elif spec.kind == "replay":
        refused = {e["what"]: e["status"] for e in run.events(spec, "submit_refused")}
        verbatim = refused.get("verbatim: the honest worker's own lease")
        reslot = refused.get("own lease, the honest worker's slots")
        row["how"] = f"honest lease id -> {verbatim}, honest slots -> {reslot}, re-slotted -> {caught}"
        row["detected"] = "yes" if row["detected"] == "yes" and verbatim == 404 and reslot == 422 else "no"
    elif spec.kind == "late_cheater":
        # its audit rate as it started cheating: the one its last honest group trained before then left it
        honest = sorted((g for g in run.trained_by(wid) if g["slot"] not in slots and g["t"] <= (start or 0)),
                        key=lambda g: g["t"])
        onset = honest[-1]["audit_rate"] if honest else None
        cheating = run.events(spec, "cheating_from_now")
        row["honest_groups_before_cheating"] = cheating[0]["honest_accepted"] if cheating else None
        row["audit_rate_at_onset"] = onset
        # one run is one draw: with each group audited at rate r, (1 - r) / r fabricated groups get in on average
        row["expected_trained_before_catch"] = (1 - onset) / onset if onset else None
        rate = f"{onset:.2f}" if onset is not None else "-"
        expected = f"{row['expected_trained_before_catch']:.1f}" if onset else "-"
        row["how"] = (f"honest for {row['honest_groups_before_cheating']} groups (audit rate {rate}, so {expected} "
                      f"groups expected in), then fabricated: {caught}")
    elif spec.kind in CHOOSING_KINDS:
        row["how"] = f"real samples, true log-probs, {spec.kind.replace('_', ' ')}: {caught}; 403 after"
    else:
        row["how"] = f"invented log-probs {INVENTED_LOGPROB}/token: {caught}; 403 after"
    return row


def reward_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    wid = run.worker_id(spec)
    claims = run.events(spec, "reward_claims")
    statuses = [s for e in claims for s in e["statuses"]]
    trained = run.trained_by(wid)
    mismatched = sum(1 for g in trained if not g["rewards_match"])
    mismatched_run = sum(1 for g in run.trained if not g["rewards_match"])
    mean = sum(g["reward_mean"] for g in trained) / len(trained) if trained else None
    ok = bool(statuses) and all(s == 422 for s in statuses) and mismatched_run == 0
    return {"detected": "yes" if ok else "no", "attacker_groups_trained": len(trained),
            "attacker_groups_trained_after": mismatched, "reward_mismatches_in_run": mismatched_run,
            "how": f"{len(statuses)} claims -> {dict(Counter(statuses))}; its {len(trained)} trained groups "
                   f"carry the verifier's rewards (mean {mean if mean is None else round(mean, 2)} vs 1.0 claimed)"}


def duplicate_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    wid = run.worker_id(spec)
    copies = run.events(spec, "copies")
    one_kept = all(e["statuses"] == [200, 200, 200] and sum(not d for d in e["duplicate"]) == 1 for e in copies)
    per_slot = Counter(g["slot"] for g in run.trained_by(wid))
    twice = sum(count - 1 for count in per_slot.values() if count > 1)
    run_twice = run.reliability["groups_trained_twice"]
    ok = bool(copies) and one_kept and twice == 0 and run_twice == 0
    return {"detected": "yes" if ok else "no", "attacker_groups_trained": sum(per_slot.values()),
            "attacker_groups_trained_after": twice + run_twice,
            "how": f"{len(copies)} leases x3 copies: {'1 kept, 2 duplicate each' if one_kept else 'NOT 1 kept each'}; "
                   f"groups_trained_twice={run_twice}, "
                   f"{run.reliability['duplicate_submissions']} duplicates counted"}


def late_lease_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    wid = run.worker_id(spec)
    outcomes = run.events(spec, "submit_refused") + run.events(spec, "submitted")
    late = [e for e in outcomes if e["what"] == "late"]
    just = [e for e in outcomes if e["what"] == "just_late"]
    refused_slots = {s for e in late if e["event"] == "submit_refused" for s in e["slots"]}
    leaked = sum(1 for g in run.trained_by(wid) if g["slot"] in refused_slots)
    statuses = [e.get("status", 200) for e in late]
    just_status = (just[0].get("status", 200) if just else None)
    q = run.quarantine(wid)
    return {"detected": "yes" if late and all(s == 409 for s in statuses) else "no",
            "attacker_groups_trained": len(run.trained_by(wid)), "attacker_groups_trained_after": leaked,
            "just_late_status": just_status, "just_late_quarantined": q is not None,
            "how": f"2.5 s late -> {statuses}; 0.2 s late -> {just_status}"
                   f"{' (then quarantined by audit)' if q else ''}"}


def relay_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    registered = run.events(spec, "registered")
    served = (run.events(spec, "relay_served") or [{}])[-1]
    evil = registered[0]["relay_url"] if registered else "<none>"
    logs = list((run.run_dir / "workers").glob("*.log")) + [
        p for p in (run.run_dir / "attackers").glob("*.out") if p.stem != spec.name]
    failovers, credited, loads = 0, 0, 0
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if f"from {evil}:" in line and "moving on to" in line:
                failovers += 1
            if (match := re.search(r"v\d+: \d+ chunks in [0-9.]+s \((.*)\)$", line)) is not None:
                loads += 1
                credited += sum(int(n) for n in re.findall(rf"(\d+) from {re.escape(evil)}\b", match.group(1)))
    bad = sum(v for k, v in served.items() if k != "t" and k != "event" and k != "manifests_real")
    honest_q = run.honest_quarantined()
    # detected: it really served bad manifests or chunks, and peers accepted none of its chunks
    ok = bad > 0 and credited == 0 and not honest_q and run.steps > 0
    return {"detected": "yes" if ok else "no", **nothing_trained(run, spec),
            "relay_bad_items_served": bad, "relay_failovers": failovers, "relay_chunks_accepted": credited,
            "peer_version_loads": loads, "honest_quarantined": honest_q,
            "how": f"served {bad} bad manifests/chunks; peers failed over {failovers}x, accepted 0 of its chunks "
                   f"({credited}); {loads} verified loads; honest audits clean: {not honest_q}"}


def oversize_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    probes = run.events(spec, "probe")
    ok = len(probes) >= 4 and all(p["status"] == p["expected"] for p in probes)
    chunked = next((p for p in probes if p["what"] == "coordinator, session credential, chunked 64 MiB"), None)
    cut = f"413 after {chunked['body_bytes_sent'] / MIB:.1f} MiB sent" if chunked else "-"
    statuses = ",".join(str(p["status"]) for p in probes)
    return {"detected": "yes" if ok else "no", **nothing_trained(run, spec),
            "probes": probes,
            "how": f"{len(probes)} probes -> {statuses} (expected {','.join(str(p['expected']) for p in probes)}); "
                   f"announced bodies refused with 0 bytes sent; chunked: {cut}"}


def flood_row(run: Outcome, spec: Attack, clean: Outcome) -> dict[str, Any]:
    flood = (run.events(spec, "flood") or [{}])[0]
    statuses = flood.get("statuses", {})
    admitted, limited = statuses.get("200", 0), statuses.get("429", 0)
    ratio = run.step_s / clean.step_s
    return {"detected": "yes" if limited and admitted + limited == flood.get("count") else "no",
            **nothing_trained(run, spec),
            "registrations": statuses, "workers_dead": run.reliability["workers_dead"],
            "how": f"{admitted}/{flood.get('count')} registered, {limited} refused 429 in "
                   f"{flood.get('seconds', 0):.1f}s (p50 {1000 * flood.get('latency_p50_s', 0):.0f} ms); "
                   f"{run.reliability['workers_dead']} declared dead later; run {run.steps} steps, step x{ratio:.2f}"}


def slowloris_row(run: Outcome, spec: Attack, clean: Outcome) -> dict[str, Any]:
    report = (run.events(spec, "slowloris") or [{}])[0]
    targets = report.get("targets", {})
    opened = sum(t["opened"] for t in targets.values())
    # closed while the learner was still training (a server that stops closes everything: that is no defence)
    closed = {label: sum(1 for at in t["closed_at"] if at <= run.last_step_t) for label, t in targets.items()}
    held = {label: sorted(at - report["started"] for at in t["closed_at"]) for label, t in targets.items()}
    ratio = run.step_s / clean.step_s
    during = sum(closed.values())
    statuses = Counter(s for t in targets.values() for s, n in t["statuses"].items() for _ in range(n))
    return {"detected": "yes" if opened and during == opened else "no", **nothing_trained(run, spec),
            "slowloris_opened": {k: t["opened"] for k, t in targets.items()},
            "slowloris_closed_during_training": closed,
            "slowloris_held_s_max": {k: round(v[-1], 1) if v else None for k, v in held.items()},
            "how": f"{opened} connections dribbling 1 B/s, {during} closed while training ({dict(statuses)}); "
                   "held at most " + ", ".join(f"{k.split(',')[0]} {k.split(', ')[-1]} {v[-1]:.0f}s"
                                               for k, v in held.items() if v)
                   + f"; run {run.steps} steps, step x{ratio:.2f}"}


def amplification_row(run: Outcome, spec: Attack, clean: Outcome) -> dict[str, Any]:
    ids = [e["worker_id"] for e in run.events(spec, "registered")]  # the identities its process registered
    quarantines = [q for q in (run.quarantine(wid) for wid in ids) if q is not None]
    after = sum(1 for wid in ids for g in run.trained_by(wid) if (q := run.quarantine(wid)) and g["t"] >= q["t"])
    first = min((a["t"] for a in run.accepted if a["worker_id"] in ids), default=None)
    last = max((q["t"] for q in quarantines), default=None)
    taken = run.steps * 8 - run.reliability["groups_trained"]  # groups discarded from the learner's batches
    stale, clean_stale = run.reliability["groups_dropped_stale"], clean.reliability["groups_dropped_stale"]
    attackers = run.attacker_ids()
    honest = sum(len(a["slots"]) for a in run.accepted if a["worker_id"] not in attackers)
    return {"detected": "yes" if ids and len(quarantines) == len(ids) else "no",
            "seconds_to_quarantine": last - first if first is not None and last is not None else None,
            "groups_to_quarantine": sum(len(a["slots"]) for a in run.accepted if a["worker_id"] in ids),
            "attacker_groups_trained": sum(len(run.trained_by(wid)) for wid in ids),
            "attacker_groups_trained_after": after, "sybils": len(ids), "sybils_quarantined": len(quarantines),
            "discarded_from_batches": taken, "groups_dropped_stale": stale, "clean_groups_dropped_stale": clean_stale,
            "honest_groups_accepted": honest,
            "how": f"{len(quarantines)}/{len(ids)} identities quarantined, {taken} groups cut from batches; then "
                   f"{stale} honest groups dropped stale (clean {clean_stale}), {100 * stale / max(honest, 1):.0f}% "
                   f"of honest generation wasted"}


def poison_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    """One behaviour log-prob of -1000 (refused at the door), then one of -45 in an otherwise honest
    lease: left out of the step as implausible (or failed at an audit), the worker quarantined."""
    wid = run.worker_id(spec)
    refused = {e["what"]: e["status"] for e in run.events(spec, "submit_refused") if e.get("what")}
    inside = [e for e in run.events(spec, "submitted") if e.get("what") == "inside the floor" and e["accepted"]]
    slots = {s for e in inside for s in e["slots"]}
    q = run.quarantine(wid)
    in_batch = [g for g in run.trained_by(wid) if g["slot"] in slots]
    left_out = sum(r.get("implausible_rows", 0) for r in run.records)
    ok = refused.get("below the floor") == 422 and q is not None
    return {"detected": "yes" if ok else "no", "groups_to_quarantine": len(slots),
            "attacker_groups_trained": len(run.trained_by(wid)) - len(in_batch),
            "attacker_groups_trained_after": sum(1 for g in in_batch if q is None or g["t"] >= q["t"]),
            "poisoned_in_batch": len(in_batch), "implausible_rows_left_out": left_out,
            "quarantine_reason": q["reason"] if q else None, "params_finite": run.steps > 0,
            "how": f"-1000 -> {refused.get('below the floor')}; -45 accepted in {len(slots)} groups, "
                   f"{len(in_batch)} reached a batch, {left_out:.0f} rows left out as implausible; "
                   f"quarantined: {(q or {}).get('reason', 'no')[:60]}; every version published finite"}


def hoarder_row(run: Outcome, spec: Attack, clean: Outcome) -> dict[str, Any]:
    """Asks for 4096 groups a lease and never delivers: capped, throttled, parked; the run goes on."""
    hoards = run.events(spec, "hoard")
    granted = [e["granted"] for e in hoards if e["status"] == "granted"]
    parked = sum(e["status"] == "parked" for e in hoards)
    ratio = run.step_s / clean.step_s
    wall = (run.wall_s / run.steps) / (clean.wall_s / clean.steps)
    biggest = max(granted, default=0)
    # the goal: the run's steps/s within 20% of the clean run's, i.e. its seconds a step at most 1/0.8 of them
    ok = biggest <= 1 and parked > 0 and wall <= 1 / 0.8
    return {"detected": "yes" if ok else "no", **nothing_trained(run, spec),
            "hoard_leases": len(granted), "hoard_groups": sum(granted), "hoard_max_lease": biggest,
            "hoard_parked_answers": parked, "leases_expired": run.reliability["leases_expired"],
            "run_s_per_step_vs_clean": wall,
            "how": f"asked 4096 a lease: {len(granted)} leases of at most {biggest} groups ({sum(granted)} in all, "
                   f"{granted[:6]}...), then parked ({parked} answers); median step x{ratio:.2f}, "
                   f"s/step over the run x{wall:.2f} of a clean run of the same settings just before"}


def telemetry_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    """NaN/inf/disordered timeline events, an infinite upload rate, forged and reserved names."""
    probes = run.events(spec, "probe")
    twin = (run.events(spec, "twin") or [{}])[0]
    twin_name = run.workers.get(twin.get("worker_id"), "")
    forged = "forged" in run.train_log
    ok = bool(probes) and all(p["status"] == p["expected"] for p in probes) and twin_name.startswith("local-0#") \
        and not forged
    statuses = ",".join(str(p["status"]) for p in probes)
    return {"detected": "yes" if ok else "no", **nothing_trained(run, spec),
            "probes": probes, "twin_named": twin_name, "forged_line_in_log": forged,
            "how": f"{len(probes)} probes -> {statuses}; a second 'local-0' became {twin_name!r}; "
                   f"forged log line: {'yes' if forged else 'no'}; the run's report renders"}


def resume_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    """Fabricated groups claiming v-1 the moment the learner resumed: audited at v-1 (its weights
    kept with the checkpoint) or left out, never trained unaudited."""
    wid = run.worker_id(spec)
    back = (run.events(spec, "learner_back") or [{}])[0]
    resumed = back.get("version")
    row = audit_row(run, spec)
    audited = {(a["slot"], a["version"]) for a in run.audited if a["worker_id"] == wid}
    unaudited = [g for g in run.trained_by(wid) if (g["slot"], g["version"]) not in audited]
    resumed_t = min((e["t"] for e in run.events(spec, "registered")), default=float("inf"))
    after = [r for r in run.records if r.get("time", 0) >= resumed_t]
    unauditable = sum(r.get("groups_unauditable", 0) for r in after)
    claims = sorted({e["version"] for e in run.events(spec, "submitted") if e.get("malicious")})
    kept = re.search(r"audits can check versions (\[[0-9, ]*\]) after the restart", run.train_log)
    row.update({
        "resumed_at": resumed, "claimed_versions": claims, "trained_unaudited_after_resume": len(unaudited),
        "groups_unauditable_after_resume": unauditable, "audit_versions_after_resume": kept.group(1) if kept else None,
        "attacker_groups_trained_after": row["attacker_groups_trained_after"] + len(unaudited),
    })
    row["detected"] = "yes" if row["detected"] == "yes" and not unaudited else "no"
    gap = re.search(r"differ by ([0-9.]+) nats/token from v(\d+)'s", row["quarantine_reason"] or "")
    caught = f"audited at v{gap.group(2)}, gap {gap.group(1)} nats/tok: quarantined" if gap else "never quarantined"
    row["how"] = (f"resumed at v{resumed} (audits keep {row['audit_versions_after_resume']}); claimed {claims}: "
                  f"{caught}; trained unaudited after the resume: {len(unaudited)}; drawn but unauditable "
                  f"(left out): {unauditable:.0f}")
    return row


#: attacks made of malicious submissions: an attacker that never got to send one attempted nothing
SUBMISSION_KINDS = (*AUDIT_KINDS, "poison_logprob", "sybil_fabricate", "resume_claim")


def call_chooser_row(run: Outcome, spec: Attack) -> dict[str, Any]:
    """A worker answering agents' calls with samples of its own randomness: quarantined, none of its
    answers handed to an agent after the catch, no group with one of its turns trained."""
    wid = run.worker_id(spec)
    q = run.quarantine(wid)
    at = q["t"] if q else None
    answered = sorted(c["t"] for c in run.calls if c["worker_id"] == wid)
    after = sum(1 for t in answered if at is not None and t >= at)
    trained = [g for g in run.trained if wid in g.get("workers", [g["worker_id"]])]
    drawn = re.search(r"lies ([0-9.]+) outside the interval its draw picks", q["reason"]) if q else None
    caught = f"draws: a token {drawn.group(1)} outside its interval" if drawn else (q["reason"] if q else "never")
    return {"detected": "yes" if q is not None and after == 0 and not trained else "no",
            "seconds_to_quarantine": at - answered[0] if at is not None and answered else None,
            "groups_to_quarantine": None, "attacker_groups_trained": len(trained),
            "attacker_groups_trained_after": len(trained), "calls_answered_before": len(answered) - after,
            "calls_answered_after": after,
            "how": f"{len(answered)} calls answered, quarantined ({caught}) "
                   f"{'-' if at is None or not answered else f'{at - answered[0]:.1f}s'} after its first; "
                   f"{after} answered after, {len(trained)} groups with its turns trained"}


def attempted(run: Outcome, spec: Attack) -> bool:
    """Whether the attacker made its attack. One that the run never let get that far (starved of
    leases, or still delivering the honest groups it must send first when the run ended) proves
    nothing about the defence either way: its row says ``not attempted``, not ``no``."""
    if spec.kind not in SUBMISSION_KINDS:
        return True
    return any(e.get("malicious") for e in run.events(spec) if e["event"] in ("submitted", "submit_refused"))


def make_row(spec: Attack, run: Outcome, clean: Outcome) -> dict[str, Any]:
    if spec.kind in AUDIT_KINDS:
        row = audit_row(run, spec)
    elif spec.kind == "flood":
        row = flood_row(run, spec, clean)
    elif spec.kind == "slowloris":
        row = slowloris_row(run, spec, clean)
    elif spec.kind == "sybil_fabricate":
        row = amplification_row(run, spec, clean)
    elif spec.kind == "hoarder":
        row = hoarder_row(run, spec, clean)
    elif spec.kind == "call_chooser":
        row = call_chooser_row(run, spec)
    else:
        row = {"reward": reward_row, "duplicate": duplicate_row, "late_lease": late_lease_row, "relay": relay_row,
               "oversize": oversize_row, "poison_logprob": poison_row, "telemetry": telemetry_row,
               "resume_claim": resume_row}[spec.kind](run, spec)
    crashed = run.events(spec, "crashed")
    if crashed:  # an attacker that fell over proves nothing
        row["detected"], row["attacker_crashed"] = "no", crashed[0]["error"]
    elif not attempted(run, spec):
        row["detected"] = "not attempted"
    return {"attack": spec.row, "kind": spec.kind, "run": run.name, "seconds_to_quarantine": None,
            "groups_to_quarantine": None, **row, "final_accuracy": run.final_accuracy,
            "clean_accuracy": clean.final_accuracy, "step_s_vs_clean": run.step_s / clean.step_s,
            "steps": run.steps, "honest_workers_quarantined": run.honest_quarantined()}


def plot(rows: list[dict[str, Any]], runs: dict[str, dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["attack"] for r in rows]
    x = range(len(rows))
    fig, (groups, times, stale) = plt.subplots(1, 3, figsize=(19, 5.8), gridspec_kw={"width_ratios": [3, 1.6, 1.6]})
    width = 0.4
    groups.bar([i - width / 2 for i in x], [r["attacker_groups_trained"] or 0 for r in rows], width,
               label="attacker groups trained (before quarantine / legitimate)")
    groups.bar([i + width / 2 for i in x], [r["attacker_groups_trained_after"] or 0 for r in rows], width,
               color="tab:red", label="past the defence (after quarantine, twice, refused): must be 0")
    accepted = [r["groups_to_quarantine"] for r in rows]
    groups.plot([i for i, a in zip(x, accepted) if a is not None], [a for a in accepted if a is not None], "kx",
                markersize=9, label="malicious groups accepted before quarantine")
    for i, r in enumerate(rows):
        verdict, color = {"yes": ("detected", "green"), "no": ("NOT detected", "red")}.get(
            r["detected"], (r["detected"], "gray"))
        groups.text(i, 0.97, verdict, ha="center", va="top", fontsize=7, rotation=90,
                    transform=groups.get_xaxis_transform(), color=color)
    groups.set_yscale("symlog", linthresh=1)
    groups.set_ylim(0, max([r["attacker_groups_trained"] or 0 for r in rows] + [10]) * 30)
    groups.set_xticks(list(x), labels, rotation=35, ha="right", fontsize=8)
    groups.set_ylabel("groups (symlog)")
    groups.set_title("What each attack got trained")
    groups.legend(fontsize=7, loc="lower right")
    audit = [r for r in rows if r["seconds_to_quarantine"] is not None and r["kind"] in AUDIT_KINDS]
    times.barh([r["attack"] for r in audit], [r["seconds_to_quarantine"] for r in audit], color="tab:orange")
    for i, r in enumerate(audit):
        times.text(r["seconds_to_quarantine"], i,
                   f" {r['seconds_to_quarantine']:.2f}s, {r['groups_to_quarantine']} groups", va="center", fontsize=8)
    times.set_xlim(0, max([r["seconds_to_quarantine"] for r in audit] + [0.1]) * 1.8)
    times.tick_params(axis="y", labelsize=8)
    times.set_xlabel("seconds from first malicious group accepted to quarantine")
    times.set_title("Time to quarantine (audit rows)")
    names = list(runs)
    stale.bar(names, [runs[n]["reliability"]["groups_dropped_stale"] for n in names],
              color=["tab:green" if n == "clean" else "tab:gray" for n in names])
    for i, n in enumerate(names):
        cut = runs[n]["steps"] * 8 - runs[n]["reliability"]["groups_trained"]
        if cut:
            stale.text(i, runs[n]["reliability"]["groups_dropped_stale"], f"{cut} cut\nfrom batches", ha="center",
                       va="bottom", fontsize=7)
    stale.set_ylabel("groups dropped as stale (whole run)")
    stale.set_title("Stale drops per run (a batch cut by a\nquarantine is topped up from the buffer)", fontsize=10)
    stale.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(out / "attacks.png", dpi=110)
    plt.close(fig)
