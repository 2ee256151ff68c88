"""echo2 as a Tinker-compatible RL service (``echo2 serve``): a client's own training loop — the
``tinker`` SDK, ``tinker-cookbook`` recipes — trains through echo2's learner. See docs/tinker.md.

* ``api.py`` — the ``/api/v1`` routes; ``wire.py`` — the SDK's own types and protobuf schema on
  the wire;
* ``service.py`` — sessions, training clients and saves as work in each client's ``seq_id``
  order, once (``turns.py``), answering futures (``futures.py``);
* ``sessions.py`` — what a silent client held, released; ``keys.py`` — the tenants (a key each,
  stored hashed; another key's ids answered as unknown); ``budget.py`` — sessions, clients and
  memory bounded;
* ``training.py`` — a LoRA adapter and an AdamW per training client on the one base model;
* ``checkpoints.py`` — durable ``tinker://`` paths, a save written aside;
* ``sampling.py`` — the fleet's side: samplers published as bundles, requests as the ``service``
  work source's, results audited before a client sees them; ``demand.py`` — the clients' steps
  as cost-aware activation reads them.
"""
