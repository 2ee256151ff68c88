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
"""
