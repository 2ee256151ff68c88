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

**Launchers.** ``launcher: local`` (default) starts ``workers.count`` ``echo2 worker`` subprocesses
(``local.py``; their ``WorkerOptions``, token included, in ``$ECHO2_WORKER_OPTIONS``, not on the
command line); ``launcher: ray`` places them as Ray actors (``ray_actors.py``; ``ray.*``: cluster
address or a local Ray started for the run, CPUs/GPUs per actor, ``max_restarts``). An actor runs the
same ``RolloutWorker``, built from the same options, over the same HTTP protocol; when it dies Ray
restarts it (on a node with room, when its own node died) and ``RayWorkers`` calls its ``run`` again
(Ray's own call retry did not come after a node's death), the new worker registers again, and the
coordinator expires the dead one's leases as for any dead worker (tested: one actor killed mid-run,
the run completes with every prompt accounted for). A local Ray gets its token-authentication token
through ``RAY_AUTH_TOKEN``. On a cluster (``ray.address``) the actors are spread over the nodes
(``SPREAD``), reach the coordinator at its host's address and advertise their node's address for
their relays (tested on three lab hosts: a node killed mid-run, its worker declared dead, its actor
restarted on the node left, the worker joining again from there, the run reaching its last step).
Local workers get SIGTERM when the learner dies (Linux ``PR_SET_PDEATHSIG``); a resumed run starts
its own.
"""
