"""Planning a fleet: what ECHO-2's overlap-based capacity model and cost-aware activation decide,
with no torch and no coordinator (``echo2 plan`` starts without either).

* ``capacity.py`` — the capacity model and its provisioning rule; ``provision.py`` — provisioning
  a fleet against it;
* ``activation.py`` — min-cost activation; ``activation_rule.py`` — the run-time activation rule on
  a small view of each worker (used live and in simulations); ``billing.py`` — cost accounting,
  one book for both;
* ``broadcast_time.py`` — the broadcast-time model;
* ``inventory.py`` — inventories of workers and ``echo2 plan``; ``report.py`` — its report;
* ``calibration.py`` — ``echo2 calibrate``: one run's response lengths and decode curve;
  ``lengths.py`` — response lengths as a per-group distribution; ``engine_curve.py`` — an engine's
  throughput as its batch drains;
* ``payoff.py`` — where distributing pays (``echo2 plan --scenario``).

**Cost-aware activation** (``docs/capacity.md``), the live rule ``activation_rule.py``, applied in a
run by ``coordinator/fleet.py`` and in a simulation by the simulator. Each submitted lease updates the
worker's measured throughput (over its whole lease cycle, less the coordinator's holds and its waits
for a version: ``core/profiling.LeaseCycle``); with the learner's step time and the dissemination
latency, both measured by the coordinator's run clock (``core/run_clock.py``), and each worker's own
dissemination time (``core/dissemination.py``), the coordinator keeps the cheapest set of workers that
meets the provisioning rule at the set's own dissemination time active and parks the others (lease
reply ``parked``), re-planning when a worker joins, leaves, dies or is quarantined and every
``activation.replan_every`` steps; the workers active now are weighed ``activation.switch_margin``
cheaper and a scale-down must save more than that share (no switching on noise) and something at all
(a $0/h worker is never parked), and an unmeasured worker is tried only while its measure could
change the choice. Activation forgets: one measured time counts at most ``MAX_RISE`` times the moving
average it joins (``core/smoothing.py``: one fetch stalled behind a trickling relay had parked an
honest worker for good), and a worker parked ``activation.remeasure_after_s`` is weighed as a new one
again, its throughput and dissemination time dropped (``activation_rule.stale``,
``Decision.remeasure``, applied by ``activation_rule.apply`` to the coordinator's records and the
simulator's workers alike). When the live fleet cannot reach ``activation.target_utilization``
(dissemination-bound, or too few workers), the rule aims for ``activation.reachable_share`` of the
best utilization unlimited throughput would give (at the dissemination time where that is best)
instead of running everyone for nothing. The rule's knobs (``config.ActivationRule``) are the same
section in a run's config and in a simulator scenario. Costs (per worker class, learner, total,
centralized counterfactual) are in the metrics, the summary and ``curves.png``.
"""
