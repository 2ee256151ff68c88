"""echo2: RL post-training of language models with a central learner and remote rollout workers.

The roles, each a package whose ``__init__`` lists its modules: ``coordinator/`` (the run's books
and the workers' requests), ``learner/`` (verified groups in, a step, a version out),
``rollout/`` (the worker), ``broadcast/`` (versions to the fleet), ``service/`` (the Tinker API),
``gateway/`` (agents), ``launch/`` (the processes a user starts); the shared layers ``core/``
(pure decisions, the simulator's too), ``model/``, ``net/``, ``config/``, ``tasks/``; the tools
``planning/``, ``simulation/``, ``report/``, ``telemetry/``, ``lab/``, ``recipes/``. At the root:
``cli.py`` (``echo2 ...``), ``protocol.py`` (the wire's types), ``exchange.py`` (what the learner
and the coordinator hand each other) and ``units.py``. docs/architecture.md draws the map.
"""

__version__ = "0.1.0"
