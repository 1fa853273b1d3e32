"""What daskrl installs on every Dask worker: the topic bus, shared-memory RPC handlers, and housekeeping.

:class:`WorkerPlugin` owns the worker's :class:`~daskrl.runtime.messaging.bus.Bus` (components reach it with
:func:`bus_of`, as Dask's own pub/sub extension was reached through its worker), and runs the housekeeping that
keeps a worker clean whatever happens to a run:

- a sweep of shared-memory segments whose owner process died (every few seconds), and at start of the host's
  multiprocessing semaphores that no process maps (those of batch jobs killed whole: see ``cleanup.semaphores``);
- a watch that stops components whose actor Dask released (their driver's client is gone);
- on an embedded cluster, a watch that ends the worker when its driver dies, and a deaf ear to the terminal's
  Ctrl-C (only the driver acts on it: checkpoint, stop the components, exit 0);
- under a nanny, SIGTERM closes the worker in order (its rollout workers drain first: see ``teardown``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import weakref
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin as DaskWorkerPlugin
from tornado.ioloop import PeriodicCallback

from daskrl.runtime import dask_internals
from daskrl.runtime.cleanup import semaphores
from daskrl.runtime.logs import route_logs_for_good
from daskrl.runtime.memory import params, shm
from daskrl.runtime.messaging.bus import STREAM_OP, Bus
from daskrl.runtime.messaging.registry import LEAVING_TOPIC

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskrl-bus"
#: seconds a leaving worker's rollout workers get to finish their slots and see them handed back (``dask worker``
#: gives a closing worker process about 10 s before it is terminated)
DRAIN_TIMEOUT_S = 5.0
_sweeping = threading.Event()  # the periodic segment sweep runs in this process


def bus_of(worker: Any) -> Bus:
    """The topic bus of ``worker`` (raises with the fix when daskrl's plugin is not installed there)."""
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None or getattr(plugin, "bus", None) is None:
        raise RuntimeError(
            "the daskrl topic bus is not running on this worker: components must run on Dask workers of a "
            "cluster opened with daskrl.runtime.connect_cluster (which installs the daskrl worker plugin)")
    return plugin.bus


class WorkerPlugin(DaskWorkerPlugin):
    """Installs the topic bus, shared-memory RPC handlers and the housekeeping of the module docstring."""

    name = PLUGIN_NAME
    idempotent = True  # a second run on the same cluster shares the one bus

    def __init__(self, owner_pid: int | None = None, log_path: str | None = None) -> None:
        """torch is not imported here: only the components that compute with it do (learners, inference workers and
        samplers of models the numpy path cannot run), so a worker that only samples on the numpy path never pays
        its 100 MB and 0.7 s (an embedded cluster's workers share the forkserver's copy instead)."""
        self.owner_pid = owner_pid  # embedded clusters: the driver; when it dies (even SIGKILL), so do we
        self.log_path = log_path  # embedded clusters: the run's log file
        self.bus: Bus | None = None
        self._watch: PeriodicCallback | None = None

    async def setup(self, worker: Any) -> None:
        shm.sweep(dead_only=True)  # leftovers of processes that died (SIGKILL, crashed runs)
        semaphores.remove_orphans(semaphores.of_this_user())  # and of job trees killed whole
        self.bus = bus = Bus(worker)
        dask_internals.add_worker_handlers(
            worker, rpc={"daskrl_bus_routes": bus.set_routes, "daskrl_shm_read": shm.serve_read,
                         "daskrl_shm_read_many": shm.serve_read_many,
                         "daskrl_shm_write": shm.serve_write, "daskrl_params_fetch": params.serve_fetch},
            streams={STREAM_OP: bus.on_stream})
        reply = await worker.scheduler.daskrl_bus_hello(address=worker.address)
        bus.set_routes(reply["routes"], reply["version"])
        if not _sweeping.is_set():  # one sweep per process, however many workers it holds (--serial)
            _sweeping.set()
            _start_daemon(_sweep_dead_owners, "daskrl-shm-sweep")
        self._watch = PeriodicCallback(ReleasedComponentWatch(bus, worker).check, 1000)
        self._watch.start()
        if getattr(worker, "nanny", None):
            _close_in_order_on_sigterm(worker)
        if self.owner_pid and self.owner_pid != os.getpid():  # a worker process of its own
            _start_daemon(_exit_with_owner, "daskrl-owner-watch", self.owner_pid)
            _ignore_terminal_interrupt()
            if self.log_path:
                route_logs_for_good(self.log_path)

    async def teardown(self, worker: Any) -> None:
        """The worker is closing (``dask worker`` got SIGTERM, the cluster retires it or shuts down): components
        that can leave without losing samples (rollout workers) drain first, and the run hears of each, with its
        final statistics, on :data:`LEAVING_TOPIC`; then everything here is released."""
        if self._watch is not None:
            self._watch.stop()
        if self.bus is not None:
            running = [c for c in self.bus.components.values() if c.state == "running"]
            if running:
                worker.log_event(LEAVING_TOPIC, {"event": "leaving", "address": worker.address})
            for component in running:
                drain = getattr(component, "drain", None)
                if drain is None:
                    continue
                try:
                    final = await asyncio.wait_for(drain(DRAIN_TIMEOUT_S), DRAIN_TIMEOUT_S + 5)
                except Exception as exc:  # it is then lost as in a crash: the run recovers it
                    logger.warning("daskrl: component %r could not drain before its worker closed: %s",
                                   component.name, exc)
                    continue
                worker.log_event(LEAVING_TOPIC, {"event": "retired", "component": component.bus_name,
                                                 "address": worker.address, "stats": final})
            for component in list(self.bus.components.values()):
                component.close_now()
            await self.bus.close()
            self.bus = None


class ReleasedComponentWatch:
    """Stops components whose actor Dask has released, once a second.

    Dask releases a driver's actors when its client goes away: SIGKILLed, or cut off from the scheduler. An
    embedded cluster's workers exit with their driver (``_exit_with_owner``), but the workers of a cluster
    that outlives the run (``--scheduler``) would keep the components running: stepping envs, holding shared
    memory and registry names. A component only counts once it has been seen among the worker's actors: the
    actor is stored there after the component's constructor returns, so a new one must not look released."""

    def __init__(self, bus: Bus, worker: Any) -> None:
        self.bus, self.worker = bus, worker
        self.held: weakref.WeakSet = weakref.WeakSet()

    async def check(self) -> None:
        actors = {id(actor) for actor in dask_internals.worker_actors(self.worker)}
        for component in list(self.bus.components.values()):
            if id(component) in actors:
                self.held.add(component)
            elif component in self.held:
                self.held.discard(component)
                logger.warning("daskrl: component %r was released by Dask (its driver's client is gone): "
                               "stopping it", component.name)
                try:
                    await component.stop()
                except Exception as exc:  # the next check sees it gone; a failure to stop it is still told
                    self.bus.incidents.note("stop-released-component-failed", f"{component.name}: {exc}")


def _start_daemon(target: Any, name: str, *args: Any) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


def _exit_with_owner(pid: int, period_s: float = 1.0) -> None:
    """An embedded cluster's worker outliving its driver (SIGKILLed) would keep its shared memory and CPU:
    when the driver is gone, release the segments and exit."""
    while True:
        time.sleep(period_s)
        if not shm.pid_alive(pid):
            shm.close_owned()
            os._exit(0)


def _sweep_dead_owners(period_s: float = 5.0) -> None:
    """Remove segments whose owner process died, every ``period_s`` seconds, while this worker runs.

    The sweep at worker start is not enough: when a driver is SIGKILLed, Dask's nanny pipe ends its workers
    with ``os._exit`` at once (before ``_exit_with_owner`` can release anything), and a run started right then
    sweeps while those owners are still alive."""
    while True:
        time.sleep(period_s)
        try:
            shm.sweep(dead_only=True)
        except OSError as exc:  # e.g. /dev/shm unreadable for a moment: the next sweep tries again
            logger.info("daskrl: periodic segment sweep failed (%s); trying again in %s s", exc, period_s)


def _close_in_order_on_sigterm(worker: Any) -> None:
    """SIGTERM reaches a nanny's worker process too (``kill`` of a process group, SLURM's ``scancel``, a pod's
    stop), and would end it at once, before its rollout workers drained. Instead it closes the worker in order,
    which runs this plugin's teardown: the drain. The nanny decides the rest (the same signal closes it too; a
    nanny that did not get it restarts the worker). Only under a nanny: a worker without one runs in the ``dask
    worker`` process, whose own handler already closes it in order."""
    def close(signum: int, frame: Any) -> None:
        worker.loop.add_callback(worker.close, nanny=False, reason=f"signal-{signum}")

    try:
        signal.signal(signal.SIGTERM, close)
    except ValueError:  # not the main thread (an in-process worker): the process's owner handles its signals
        pass


def _ignore_terminal_interrupt() -> None:
    """Ctrl-C in a terminal reaches every process of the foreground group, embedded workers included; only
    the driver should act on it (checkpoint, stop the components, exit 0), so its workers ignore it."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: this worker was not started by a local nanny
        pass
