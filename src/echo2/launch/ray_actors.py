"""Rollout workers as Ray actors (``launcher: ray``): Ray places them, the protocol stays HTTP.

Each actor requests ``ray.cpus_per_worker`` CPUs and ``ray.gpus_per_worker`` GPUs, so Ray
puts it on a node that has them, and runs the very worker ``echo2 worker`` runs (built from the
same :class:`~echo2.rollout.options.WorkerOptions`, which the actor receives pickled, by
:func:`echo2.rollout.options.build_worker`), talking to the coordinator over the same HTTP protocol; Ray is only the placement and restart layer. An actor that dies is
restarted by Ray (``max_restarts``), on any node with room when its own node died, and echo2 calls
its ``run`` again (:meth:`RayWorkers._rerun_lost_calls`): the new worker registers again, while
the coordinator expires the dead one's leases as for any dead worker (Ray fault tolerance:
https://docs.ray.io/en/latest/ray-core/fault_tolerance/actors.html).

Without ``ray.address`` a local Ray is started for the run and shut down after it. Ray 2.59+
turns token authentication on for local clusters
(https://docs.ray.io/en/latest/ray-security/token-auth.html); the local Ray gets a fresh
token through ``RAY_AUTH_TOKEN`` instead of Ray writing one into the home folder. To use an
existing cluster, set ``ray.address`` and give Ray its token the usual way (``RAY_AUTH_TOKEN``
or ``RAY_AUTH_TOKEN_PATH``); its nodes must reach the coordinator (``coordinator.host=0.0.0.0``)
and each other's relays (actors then listen on every interface and advertise their node's IP).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from echo2.config import Config
from echo2.rollout.options import WorkerOptions

log = logging.getLogger("echo2")
#: Seconds before an actor found temporarily unavailable (its node just died) is called again.
UNAVAILABLE_RETRY_S = 2.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("launcher=ray needs Ray: pip install 'echo2[ray]'") from None
    return ray


def namespace(coordinator_url: str) -> str:
    """The Ray namespace of a run's worker actors: one per coordinator address."""
    return "echo2-" + urlsplit(coordinator_url).netloc.replace(":", "-")


class RolloutActor:
    """One rollout worker in a Ray actor process (wrapped with ``ray.remote`` at launch)."""

    def __init__(self, options: WorkerOptions, log_file: str, remote_nodes: bool) -> None:
        self.options, self.log_file, self.remote_nodes = options, log_file, remote_nodes

    def run(self) -> str:
        """Work until the coordinator says the run is over; Ray retries this call after a restart."""
        from echo2.rollout.options import build_worker

        Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.log_file)  # appends: a restarted actor keeps one log
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        options = self.options
        if self.remote_nodes:  # peers on other nodes must reach this relay
            options = options.model_copy(update={"relay_host": "0.0.0.0",
                                                 "advertise_host": _ray().util.get_node_ip_address()})
        worker = build_worker(options)
        worker.run()
        logging.getLogger().removeHandler(handler)
        return worker.name


class RayWorkers:
    """One rollout worker as a Ray actor per entry of ``options``; the same interface as ``LocalWorkers``."""

    def __init__(self, url: str, options: list[WorkerOptions], config: Config, log_dir: Path) -> None:
        """``url``: the coordinator's (it names the actors' namespace); a worker without a name is
        called ``ray-<i>``."""
        self.url, self.config, self.log_dir = url, config, log_dir
        self.options = [o if o.name else o.model_copy(update={"name": f"ray-{i}"}) for i, o in enumerate(options)]
        self.namespace = namespace(url)
        """Actors are named ``ray-<i>`` in this Ray namespace (``ray.get_actor(name, namespace)``)."""
        self.actors: list[Any] = []
        self.runs: list[Any] = []
        """Each actor's ``run`` call in progress (replaced when it is called again)."""
        self.reruns = [0] * len(self.options)
        self.started_ray = False
        self._stopping = threading.Event()

    def _connect(self) -> None:
        ray, options = _ray(), self.config.ray
        if ray.is_initialized():
            return
        if options.address is None:
            os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
            self.started_ray = True
        threads = str(self.config.workers.threads)
        kept = ({sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
                if threading.current_thread() is threading.main_thread() else {})
        ray.init(address=options.address, num_cpus=options.num_cpus if options.address is None else None,
                 include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"}})
        for sig, handler in kept.items():  # Ray's core installs a SIGTERM handler that kills the driver: a stop
            if handler is not None:         # stays echo2's (the step in hand ends, checkpointed, workers told)
                signal.signal(sig, handler)

    def start(self) -> None:
        ray, options = _ray(), self.config.ray
        self._connect()
        remote_nodes = options.address is not None
        node_ip = ray.util.get_node_ip_address()
        actor_class = ray.remote(RolloutActor)
        for worker in self.options:
            if remote_nodes:  # other nodes reach the coordinator at this node's address, not loopback
                worker = worker.model_copy(update={"coordinator": worker.coordinator.replace("127.0.0.1", node_ip)})
            actor = actor_class.options(
                name=worker.name, namespace=self.namespace, num_cpus=options.cpus_per_worker,
                num_gpus=options.gpus_per_worker, max_restarts=options.max_restarts,
                # on a cluster, over as many nodes as there are: one node's death takes the fewest workers
                scheduling_strategy="SPREAD" if remote_nodes else "DEFAULT",
            ).remote(worker, str(self.log_dir / f"{worker.name}.log"), remote_nodes)
            self.actors.append(actor)
            self.runs.append(actor.run.remote())
        log.info("placed %d worker actors on Ray (%s; logs in %s)", len(self.actors),
                 options.address or "a local Ray", self.log_dir)
        threading.Thread(target=self._rerun_lost_calls, daemon=True, name="echo2-ray-reruns").start()

    def supervise(self) -> None:
        """Ray restarts a dead actor itself (``ray.max_restarts``) and :meth:`_rerun_lost_calls`
        calls it again: nothing more to start (:meth:`LocalWorkers.supervise`'s counterpart)."""

    def _rerun_lost_calls(self) -> None:
        """Call ``run`` again on an actor Ray restarted, up to ``ray.max_restarts`` times each.

        Ray's own retry of an actor call (``max_task_retries``) did not happen when the actor's
        node died (Ray 2.60, network lab: the actor was restarted on the other node within a second
        and sat idle for minutes), so the call is made again here, where it is seen to fail with the
        actor (``RayActorError``; a call on a restarting actor waits for it to be back)."""
        ray, watching = _ray(), set(range(len(self.runs)))
        while watching and not self._stopping.is_set():
            done, _ = ray.wait([self.runs[i] for i in watching], num_returns=1, timeout=1.0)
            for ref in done:
                index = self.runs.index(ref)
                watching.discard(index)
                try:
                    ray.get(ref)
                    continue  # the run is over for this worker
                except ray.exceptions.ActorUnavailableError:
                    # its node is gone and Ray has not yet restarted it elsewhere: call again shortly,
                    # which waits for the restart or fails for good (ActorDiedError) once Ray gives up
                    self._stopping.wait(UNAVAILABLE_RETRY_S)
                except ray.exceptions.RayActorError as error:
                    name, why = self.options[index].name, str(error).splitlines()[0]
                    if self._stopping.is_set() or self.reruns[index] >= self.config.ray.max_restarts:
                        log.warning("worker actor %s is gone for good: %s", name, why)
                        continue
                    self.reruns[index] += 1
                    log.warning("worker actor %s died (%s); Ray restarts it, echo2 calls its run again (%d of %d)",
                                name, why, self.reruns[index], self.config.ray.max_restarts)
                except Exception:  # noqa: BLE001, S112 - the worker's own error: check() and its log say it
                    continue
                if not self._stopping.is_set():
                    self.runs[index] = self.actors[index].run.remote()
                    watching.add(index)

    def check(self) -> None:
        """Raise if a worker actor failed for good while starting up (an actor that died is called
        again by :meth:`_rerun_lost_calls`)."""
        ray = _ray()
        done, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                continue
            except Exception as error:  # noqa: BLE001 - Ray wraps the worker's exception
                raise RuntimeError(f"a Ray worker actor failed: {error}") from None

    def stop(self, timeout_s: float = 15.0) -> None:
        """Workers leave by themselves once the coordinator says stop; kill stragglers, and the
        local Ray if this run started it."""
        ray = _ray()
        if self.runs:
            ray.wait(list(self.runs), num_returns=len(self.runs), timeout=timeout_s)
        self._stopping.set()
        for actor in self.actors:
            ray.kill(actor)
        if self.started_ray:
            ray.shutdown()
