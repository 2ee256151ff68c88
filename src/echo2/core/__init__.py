"""Decision cores: the rules of a run as pure functions and books — no threads, no I/O, no torch,
no clock (time is passed in). The live roles (coordinator, worker) and the simulator call the same
code for each decision, so a simulated run is decided by the very rules of a real one:

* ``staleness.py`` — which versions a slot or a step may use (bounded staleness S) and the
  pacing window;
* ``pacing.py`` — the pacing ledger: slots granted (re-queued prompts first), groups admitted,
  the oldest fresh batch taken (stale ones dropped and re-queued), lost slots released, lent slots;
* ``shares.py`` — how much of the window one worker may hold, trial, lent leases' deadlines and
  parking a worker whose leases keep expiring;
* ``leasing.py`` — the answer to a lease request (stop, parked, wait, refresh, granted; sampling
  requests ahead of a task's prompts), and whether asking for the next lease ahead pays;
* ``books.py`` — the run's books, one object the coordinator and the simulator both keep: the
  ledger, the shares, the run clock, the census, the active leases, typed ``Counters``, and the
  moves both make on them; ``sample_queue.py`` sampling requests as lease work (first come, first
  served; a request that failed on two workers is a poison pill);
* ``run_clock.py`` — a step's time (batch taken to version published) and a version's
  dissemination time as activation reads them, and when to re-plan; ``dissemination.py`` when a
  published version has reached the whole fleet;
* ``profiling.py`` — a worker's throughput over its lease cycle; ``smoothing.py`` the one moving
  average every measured time is smoothed with; ``lease_sizing.py`` how many groups fit a
  worker's free device memory;
* ``worker_protocol.py`` — a worker's protocol decisions (fetch, swap in, generate, ask, ask
  ahead), kept alike by the live worker and the simulated one;
* ``fetch_chain.py`` — a fetch's source chain: the next source on a failure, patience while a
  source's progress grows, a relay's rate floor;
* ``draw_rule.py`` — verifiable sampling's counter-based draws: ``uniform(seed, row, position)``
  by SplitMix64, the same on any device.

**Versions, staleness and pacing.** Policy version ``v`` = optimizer steps applied; the initial
weights are ``v = 0``, and learner step ``t`` turns ``v = t`` into ``v = t + 1``. A group carries the
version its worker generated it with (the lease records the version the worker declared; a submit
with any other version is refused).

*Freshness* (``staleness.is_fresh``): step ``t`` trains only on groups with
``0 <= t - version <= S``. Stale groups found in the buffer are dropped, counted
(``groups_dropped_stale``), and their prompts re-queued: no prompt is lost.

*Pacing* (``staleness.lease_window``, after AReaL; kept by ``pacing.PacingLedger``): the coordinator
numbers the group slots it grants; at learner version ``v`` it grants only while useful slots
``< (S + v + 1) * B`` (``B`` = ``learner.groups_per_step``). Slot ``k`` is meant for step ``k // B``,
and a worker at version ``w`` may take it only if ``k // B - w <= S`` (``staleness.worker_can_take``);
otherwise the lease reply says ``refresh``. Slots of expired leases and of dropped groups stop
counting, so the window never stalls. With this rule drops are the exception (docs/architecture.md
quotes the default run's count).

*Buffer order*: the learner takes the oldest-version groups first (then by slot). ``S = 0`` with
``protocol=sync`` is the on-policy barrier (``staleness.resolve``): only slots for the current step
are granted, only to workers holding the current version.
"""
