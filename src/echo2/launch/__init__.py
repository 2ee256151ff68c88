"""The processes a user starts, wired from a config: what sits on top (nothing imports it).

* ``train.py`` — ``echo2 train``: the coordinator, the local workers and the learner loop
  wired together; ``summary.py`` what a run reports when it ends;
* ``serve.py`` — ``echo2 serve``: a training service (the coordinator with sampling work only,
  the Tinker routes on the same server, local workers, the tenants' keys);
* ``coordinator.py`` — the one builder of the coordinator both commands call: the config's
  settings, the run's work (what the window paces, the task's prompts) handed over whole;
* ``work.py`` — what a training run's fleet works on, one object set up, wired, started and
  stopped alike: a task's prompts (scored by the coordinator, in processes of its own);
  ``agents.py`` an agent's episodes (its work source, the episodes' books, the gateway's desk
  and routes, the agent pool and its evaluations);
* ``ranks.py`` — the learner built alike on every torchrun rank, and the followers' loop;
* ``local.py`` — worker subprocesses, a dead one restarted (bounded, with back-off);
  ``ray_actors.py`` — workers as Ray actors;
* ``evaluator.py`` — the evaluator process of ``eval.where: process``.
"""
