"""The coordinator: the run's books under one lock, and every request of the workers and the learner
sequenced over them (ECHO-2's centralized side, beside the learner in its process).

* ``books.py`` — ``CoordinatorBooks``: one ``threading.Condition`` over the run's books
  (``core/books.py``, the simulator's too) and the coordinator's own parts, with the moves more
  than one request makes (re-plan, census, expire, drop what the learner gave back);
* ``membership.py`` — register, heartbeat, reap (the silent workers, overdue leases, each work
  source's own), leave, quarantine; ``work.py`` — lease (answered by ``core/leasing.py``, held open
  as a bounded long-poll), submit (checked, scored outside the lock, admitted), fail, respond;
  ``batches.py`` — the learner's batches, and the groups it gives back;
* ``state.py`` — ``CoordinatorState`` wires those and answers for them (the worker API, the
  learner's ``RolloutSource``), publishes versions, waits for workers, reports;
* ``sources.py`` — work sources: every kind of sampling work beside a task's prompts (a service's
  requests, an agent run's calls, one of a user's own), results routed back to the source by name;
* ``registry.py`` — workers, the run token and session credentials, liveness; ``leases.py`` —
  leases by id and the checks a submission must pass; ``records.py`` — the records the parts keep;
* ``scoring.py`` — rewards computed where the learner trusts them (the task's verifier, outside
  the lock) and the environment's answers between turns; ``scoring_processes.py`` the task rebuilt
  in spawned processes, each call bounded;
* ``versions.py`` — published versions, their relay plans and dissemination times;
  ``relay_check.py`` — whether an advertised relay is reachable and is its worker's;
* ``fleet.py`` — cost-aware activation applied live (profiles, ``planning/activation_rule.py``,
  billing); ``reliability.py`` — the reliability report;
* ``cursor.py`` — the numbered training stream and the draws trained on; ``snapshot.py`` — the
  books as plain data for ``--resume``;
* ``app.py`` — the FastAPI routes behind ``net/guard.py``; ``server.py`` — the server they run on;
  ``dashboard.py`` — the live dashboard's data and page.

**The way of one rollout group.** Lease (slots with prompt text only, version, deadline; never a
reference answer) → the worker samples G completions with behaviour log-probs → submit (lease id,
version, tokens, log-probs, generation time, timeline events; a ``reward`` field is refused like any
field the protocol does not name) → the coordinator validates under its lock (session credential,
lease owner, lease state and deadline, version, slot set, group size, lengths, token ids in
vocabulary, finite log-probs ≤ 0: ``leases.py``, :mod:`echo2.protocol`) and marks the lease as being
scored → scores every completion outside the lock (``scoring.py``: tokens decoded as sampling and
evaluation read them, ``skip_special_tokens=True``, then the task's ``episode_rewards`` a group at a
time, in one of the scoring processes, each call bounded by ``coordinator.scoring_timeout_s``, where
``coordinator.scoring_processes`` > 0, else in the handler's thread with no bound; time summed in
``reward_seconds``) → admits under the lock (refused if the lease expired or its worker was
quarantined meanwhile; ``unscorable`` if the verifier failed, ``scoring_overrun`` if it ran past the
bound) → buffer with the coordinator's rewards → learner batch → audit (some groups) → loss → new
version. A lease that expires or whose worker stops heartbeating is expired and its prompts
re-queued; a second submit of the same lease, or one sent while the first is being scored, is
answered ``duplicate`` and ignored.

**Untrusted workers.** Nothing the learner trains on rests on a worker's word alone. **Rewards** are
the coordinator's: workers never receive reference answers and report no rewards; the coordinator
scores every accepted group with the task's verifier (``scoring.py``, a scorer handed over in the
run's :class:`~echo2.coordinator.scoring.TaskPrompts`, built by ``launch/work.py``, so the coordinator
imports nothing of the learner or torch). What remains a worker's word, the behaviour log-probs and
the version it sampled with, is audited by the learner (:mod:`echo2.learner`). A worker that fails an
audit is **quarantined** (``membership.py``): its requests get 403, its active leases (one being
scored included) are re-issued, its buffered groups and its groups in the batch are discarded and
their prompts re-queued (logged and counted). It leaves the fleet even while it keeps its heartbeats
(``WorkerRecord.in_fleet``): activation re-plans without its throughput, billing stops, the relay
plan sends no peer to it and the dissemination census stops waiting for it (it had stayed in all
four: counted as capacity that got no lease, billed, and holding back every version's spread). A
worker leaving on purpose (SIGTERM/preemption) finishes the request in hand and calls
``/v1/deregister``: its unfinished leases are re-issued at once instead of after the timeout.

**The reliability report** (``reliability.py``). At the end of a run ``reliability.json`` (and a
summary line) accounts for every lease (issued = completed + expired + outstanding) and every group
(accepted, rejected by reason, duplicate, dropped as stale, discarded from quarantined workers) and
counts dead, departed and quarantined workers, and parked workers activated again
(``workers_reactivated``, from the billing book: how often activation switched; a simulated run
reports the same). Every prompt drawn from the task's stream carries its **draw index**
(``cursor.py``): the report checks ``prompts_drawn = trained + buffered + queued + out on a lease``
(``prompts_unaccounted``, always 0) and counts ``groups_trained_twice`` (by draw index, always 0).
``bench/chaos.py`` kills and preempts workers at random and reports both, with the lease ledger and
an independent count (what the workers logged as accepted vs what the learner logged as trained).

**The live dashboard.** The coordinator serves a page at ``/dashboard`` and its data at
``/v1/dashboard`` (``dashboard.py``). The data joins two sources, each read where it lives: the
coordinator's books under its lock (each worker's state — active, slow, stale, parked, throttled,
quarantined, dead, left —, version, measured rollouts/s, price, last refusal; the versions it still
tracks and how many live workers hold them; active worker-hours and their dollars from ``fleet.py``'s
billing), and the run directory for the learner's side (``report/live.py`` reads only the lines
appended to ``metrics.jsonl`` and ``timeline.jsonl`` since the last request and gives a
``report.data.RunData``, so learner utilization per time bin, the staleness histogram and the
finished disseminations are computed by the report's own code). ``create_app(run_dir=...)`` is that
coupling, the only one; without it the learner's sections are empty. A reading costs the lines
written since the previous one plus one pass over the kept fields; curves are thinned to ``400``
points and the version table to the last 40 versions. The page holds no data and is open; the viewer
credential travels in the URL's fragment (``/dashboard#token=...``, never sent to a server or logged),
and the page's script sends it as ``X-Echo2-Token`` to the relative URL ``v1/dashboard``, so the page
works under the run's TLS as it does over HTTP. A Content-Security-Policy lets the page talk to its
own origin only. ``echo2 train`` writes the link to the owner-only ``RUN_DIR/dashboard.url`` and
prints it on the terminal only (when stderr is one; not to ``train.log``, whose filter redacts the
viewer credential like the others).
"""
