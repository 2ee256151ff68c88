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
"""
