"""Decision cores: the rules of a run as pure functions and books — no threads, no I/O, no torch,
no clock (time is passed in). The live roles (coordinator, worker) and the simulator call the same
code for each decision, so a simulated run is decided by the very rules of a real one:

* :mod:`~echo2.core.staleness` — which versions a slot or a step may use (bounded staleness S);
* :mod:`~echo2.core.pacing` — the books of slots, prompts in flight and the replay buffer;
* :mod:`~echo2.core.shares` — how much of the window one worker may hold, trial and parking;
* :mod:`~echo2.core.leasing` — the answer to a lease request, built on the three above.
"""
