"""Internet-scale planning by discrete-event simulation, on the same rules as the real system.

``scenario`` (inputs) -> ``engine.simulate`` (learner, coordinator books, relay plans, workers)
-> ``results`` (utilization, staleness, dissemination, dollars, waste; a run directory) next to
``centralized`` (the co-located baseline). ``calibrate`` turns a real run directory into a
scenario, which is how the simulator is validated (``bench/simulator.py``).
"""
