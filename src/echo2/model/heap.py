"""Keep the cyclic garbage collector off the objects a process holds for its whole life.

A learner, a service or a worker holds a model, its tokenizer, a task and the libraries under
them: some 600,000 objects tracked by the collector. Every full collection walks all of them
holding the GIL, about 1 s on the machines echo2 targets, once every minute or so; in the learner's
process that second is a second in which the coordinator's event loop answers no heartbeat and no
lease request (measured by ``bench/attacks.py --agents``: an agent run's heartbeats reached 1.07 s
with no attacker, each slow one at a full collection). ECHO-2's workers are declared dead by a
heartbeat gap, so the pause is not cosmetic. Freezing what setup built (after collecting the
garbage setup left) takes those objects out of every later collection; what the run allocates
after is collected as before.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def settled() -> Iterator[None]:
    """Around a process's long phase (a run's loop, a service's serving, a worker's leases): collect
    setup's garbage, then move every surviving object out of the collector's reach; hand them back
    when the phase ends, so that a process that runs again (a test, a bench that trains run after
    run in one process) can free the last run's model when it is dropped."""
    gc.collect()
    gc.freeze()
    log.debug("%d objects set aside from garbage collection", gc.get_freeze_count())
    try:
        yield
    finally:
        gc.unfreeze()
