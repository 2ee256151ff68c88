"""The rollout worker (``echo2 worker``): registers, fetches versions, leases work, samples it and
submits; it never sees a reward.

* ``worker.py`` — the worker process around ``core/worker_protocol.py``: register, heartbeats,
  the main loop; a lease its engine fails on handed back, never the process's end;
* ``options.py`` — ``WorkerOptions``, a worker's options as one typed object;
* ``client.py`` — the coordinator's HTTP client: timeouts, retries with back-off, clear messages;
* ``weights.py`` — the worker's weights: fetch, background staging, swap-in, cancel on a lost
  session;
* ``lease_generation.py`` — one lease's work through one sampling path into a submission;
  ``timeline.py`` — the worker's timeline events;
* ``courier.py`` — the submission on a thread of its own; ``lease_ahead.py`` — the next lease
  asked for while this one generates;
* ``engines/`` — what a worker samples with and loads versions into (``hf``, ``vllm``, one's own).
"""
