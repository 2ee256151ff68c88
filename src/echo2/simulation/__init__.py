"""Internet-scale planning by discrete-event simulation, on the same rules as the real system.

``scenario`` (inputs) -> ``engine.simulate`` (learner, coordinator books, relay plans, workers)
-> ``results`` (utilization, staleness, dissemination, dollars, waste; a run directory) next to
``centralized`` (the co-located baseline). ``calibrate`` turns a real run directory into a
scenario, which is how the simulator is validated (``bench/simulator.py``).

* ``scenario.py`` — a scenario: a run's ``Config`` and the workload a config cannot say;
* ``engine.py`` — ``Simulation``: the learner and the coordinator, owning the other parts;
* ``state.py`` — the one state (the run's books, the queue, the fleet's draws, the uplinks,
  billing, the recorder); ``events.py`` — the event queue;
* ``workers.py`` — the workers' lease loop, driven by ``core/worker_protocol.py``;
  ``fleet.py`` — the simulated fleet's workers;
* ``fetching.py`` — every fetch timed along its chain; ``dissemination.py`` — the uplinks it
  shares;
* ``recorder.py`` — what a simulated run records; ``results.py`` — its figures;
* ``centralized.py`` — the co-located baseline as engines behave;
* ``calibrate.py`` — a run config as a scenario timed by a calibration; ``predict.py`` —
  ``echo2 plan --calibration``'s prediction (the capacity model where it holds, the simulation
  where it does not).
"""
