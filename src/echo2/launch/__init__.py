"""The processes a user starts, wired from a config: what sits on top (nothing imports it).

* ``train.py`` — ``echo2 train``: the coordinator, the local workers and the learner loop
  wired together; ``summary.py`` what a run reports when it ends;
* ``serve.py`` — ``echo2 serve``: a training service (the coordinator with sampling work only,
  the Tinker routes on the same server, local workers, the tenants' keys);
* ``agents.py`` — an agent run's parts (its work source, the episodes' books, the gateway's desk
  and routes, the agent pool and its evaluations);
* ``ranks.py`` — the learner built alike on every torchrun rank, and the followers' loop;
* ``local.py`` — worker subprocesses, a dead one restarted (bounded, with back-off);
  ``ray_actors.py`` — workers as Ray actors;
* ``evaluator.py`` — the evaluator process of ``eval.where: process``.
"""
