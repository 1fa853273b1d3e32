"""The topic bus: signals to slots between components, peer to peer over Dask's own comms.

Each worker runs a :class:`BusPlugin`. It keeps a :class:`Bus`: the components living in this process, the
routing table pushed by the scheduler's :class:`~daskrl.runtime.registry.BusRegistry`, and one batched stream
per peer worker (a comm opened with ``{"op": "connection_stream"}``, read by the peer's ``stream_handlers``).

- A publish from any thread only appends to a per-peer buffer; one callback on the worker's event loop
  flushes all buffers (so a burst of signals costs one loop wake-up, and order per sender/receiver is kept).
- A receiver in the same process gets the payload directly (no network, no serialization).
- Payloads must be msgpack-native (dict/list/str/int/float/bool/None/bytes): checked at publish, because a
  bad payload would otherwise break the stream for every component on it.
- The stream handler only enqueues into the receiving component; it never raises.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from distributed.batched import BatchedSend
from distributed.comm import connect
from distributed.diagnostics.plugin import WorkerPlugin
from tornado.ioloop import PeriodicCallback

from daskrl.errors import PayloadError
from daskrl.runtime import shm

if TYPE_CHECKING:
    from daskrl.runtime.component import Component

logger = logging.getLogger(__name__)

STREAM_OP = "daskrl-bus"
PLUGIN_NAME = "daskrl-bus"
_NATIVE_SCALARS = (str, int, float, bool, type(None), bytes)

_current: Bus | None = None


def current_bus() -> Bus:
    """The bus of this worker process (raises if the plugin is not installed here)."""
    if _current is None:
        raise RuntimeError(
            "the daskrl topic bus is not running in this process: components must run on Dask workers of a "
            "cluster opened with daskrl.runtime.connect_cluster (which installs the bus plugin)"
        )
    return _current


def check_payload(payload: Any, where: str, _depth: int = 0) -> None:
    """Raise :class:`PayloadError` unless ``payload`` is msgpack-native (cheap for small payloads)."""
    if isinstance(payload, _NATIVE_SCALARS):
        return
    if _depth > 32:
        raise PayloadError(f"{where}: payload nests deeper than 32 levels")
    if isinstance(payload, (list, tuple)):
        for item in payload:
            if not isinstance(item, _NATIVE_SCALARS):
                check_payload(item, where, _depth + 1)
        return
    if isinstance(payload, dict):
        for key, value in payload.items():
            if not isinstance(key, (str, int)):
                raise PayloadError(f"{where}: payload dict key {key!r} is a {type(key).__name__}; use str keys")
            if not isinstance(value, _NATIVE_SCALARS):
                check_payload(value, where, _depth + 1)
        return
    raise PayloadError(
        f"{where}: payload contains a {type(payload).__module__}.{type(payload).__name__}, which is not "
        "msgpack-native. Send dict/list/str/int/float/bool/None/bytes only: put arrays in a SharedArray or "
        "SlotPool and send the slot index, or convert small values with .tolist() / float()"
    )


class _Peer:
    """The outgoing batched stream to one peer worker, plus what waits while it connects."""

    def __init__(self) -> None:
        self.stream: BatchedSend | None = None
        self.backlog: list = []
        self.connecting = False


class Bus:
    """Per-process endpoint of the topic bus (see module docstring)."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.address: str = worker.address
        self.loop = worker.loop
        self.components: dict[str, Component] = {}
        self.routes: dict[str, dict] = {}
        self.routes_version = -1
        self._rr: dict[str, int] = defaultdict(int)  # round-robin position per work queue
        self._lock = threading.Lock()
        self._pending: dict[str, list] = defaultdict(list)
        self._flush_scheduled = False
        self._peers: dict[str, _Peer] = {}
        self.counters = {"sent": 0, "received": 0, "local": 0, "dropped": 0, "handler_errors": 0}

    # ---- routing table (from the scheduler) ----

    def set_routes(self, routes: dict, version: int) -> dict:
        if version >= self.routes_version:
            self.routes = routes
            self.routes_version = version
        return {"status": "ok", "version": self.routes_version}

    # ---- publishing ----

    def publish(self, topic: str, payload: Any, where: str = "") -> int:
        """Deliver ``payload`` to the subscribers of ``topic``; returns how many receivers it was sent to."""
        check_payload(payload, where or topic)
        route = self.routes.get(topic)
        if not route or not route["subs"]:
            self.counters["dropped"] += 1
            return 0
        subs = route["subs"]
        if route["mode"] == "one":
            position = self._rr[topic]
            self._rr[topic] = position + 1
            subs = (subs[position % len(subs)],)
        remote = False
        for address, receiver, slot in subs:
            if address == self.address:
                component = self.components.get(receiver)
                if component is not None:
                    component.enqueue(slot, payload, topic)
                    self.counters["local"] += 1
                else:
                    self.counters["dropped"] += 1
            else:
                with self._lock:
                    self._pending[address].append([receiver, slot, topic, payload])
                remote = True
        if remote:
            self._schedule_flush()
        return len(subs)

    def _schedule_flush(self) -> None:
        with self._lock:
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        self.loop.add_callback(self._flush)

    def _flush(self) -> None:
        """On the event loop: hand every buffered message to its peer's stream (one wire message per peer)."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(list)
            self._flush_scheduled = False
        for address, messages in pending.items():
            peer = self._peers.get(address)
            if peer is None:
                peer = self._peers[address] = _Peer()
            if peer.stream is not None:
                try:
                    peer.stream.send({"op": STREAM_OP, "m": messages})
                    self.counters["sent"] += len(messages)
                    continue
                except Exception as exc:  # peer gone: the registry will drop its routes
                    logger.info("bus stream to %s closed (%s); reconnecting", address, exc)
                    peer.stream = None
            peer.backlog.extend(messages)
            if not peer.connecting:
                peer.connecting = True
                asyncio.ensure_future(self._connect(address, peer))

    async def _connect(self, address: str, peer: _Peer) -> None:
        try:
            comm = await connect(address, **self.worker.connection_args)
            comm.name = "daskrl-bus"
            await comm.write({"op": "connection_stream"})
            stream = BatchedSend(interval="1ms", loop=self.loop)
            stream.start(comm)
            backlog, peer.backlog = peer.backlog, []
            if backlog:
                stream.send({"op": STREAM_OP, "m": backlog})
                self.counters["sent"] += len(backlog)
            peer.stream = stream
        except Exception as exc:
            self.counters["dropped"] += len(peer.backlog)
            logger.warning("daskrl bus: cannot reach %s (%s); %d messages dropped", address, exc, len(peer.backlog))
            peer.backlog = []
        finally:
            peer.connecting = False

    # ---- receiving ----

    def on_stream(self, m: list, **_: Any) -> None:
        """Stream handler: enqueue each message into its component. Never raises (that would kill the comm)."""
        try:
            for receiver, slot, topic, payload in m:
                component = self.components.get(receiver)
                if component is None:
                    self.counters["dropped"] += 1
                    continue
                component.enqueue(slot, payload, topic)
            self.counters["received"] += len(m)
        except Exception:  # pragma: no cover - defensive: a malformed message must not kill the stream
            self.counters["handler_errors"] += 1
            logger.exception("daskrl bus: malformed message dropped")

    async def close(self) -> None:
        for peer in self._peers.values():
            if peer.stream is not None:
                try:
                    peer.stream.abort()
                except Exception:
                    pass
        self._peers.clear()


def _exit_with_owner(pid: int, period_s: float = 1.0) -> None:
    """An embedded cluster's worker outliving its driver (SIGKILLed) would keep its shared memory and CPU:
    when the driver is gone, release the segments and exit."""
    import os
    import time

    while True:
        time.sleep(period_s)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shm.close_owned()
            os._exit(0)
        except PermissionError:
            pass


class ReleasedComponentWatch:
    """Stops components whose actor Dask has released, once a second.

    Dask releases a driver's actors when its client goes away: SIGKILLed, or cut off from the scheduler. An
    embedded cluster's workers exit with their driver (``_exit_with_owner``), but the workers of a cluster
    that outlives the run (``--scheduler``) would keep the components running: stepping envs, holding shared
    memory and registry names. A component only counts once it has been seen among the worker's actors: the
    actor is stored there after the component's constructor returns, so a new one must not look released."""

    def __init__(self, bus: Bus, worker) -> None:
        self.bus, self.worker = bus, worker
        self.held: weakref.WeakSet = weakref.WeakSet()

    async def check(self) -> None:
        actors = {id(actor) for actor in self.worker.state.actors.values() if actor is not None}
        for component in list(self.bus.components.values()):
            if id(component) in actors:
                self.held.add(component)
            elif component in self.held:
                self.held.discard(component)
                logger.warning("daskrl: component %r was released by Dask (its driver's client is gone): "
                               "stopping it", component.name)
                try:
                    await component.stop()
                except Exception:  # pragma: no cover - stopping is best effort; the next check sees it gone
                    logger.exception("daskrl: stopping released component %r failed", component.name)


def _sweep_dead_owners(period_s: float = 5.0) -> None:
    """Remove segments whose owner process died, every ``period_s`` seconds, while this worker runs.

    The sweep at worker start is not enough: when a driver is SIGKILLed, Dask's nanny pipe ends its workers
    with ``os._exit`` at once (before ``_exit_with_owner`` can release anything), and a run started right then
    sweeps while those owners are still alive."""
    import time

    while True:
        time.sleep(period_s)
        try:
            shm.sweep(dead_only=True)
        except Exception:  # pragma: no cover - a sweep is best effort
            logger.debug("daskrl: periodic segment sweep failed", exc_info=True)


def _ignore_terminal_interrupt() -> None:
    """Ctrl-C in a terminal reaches every process of the foreground group, embedded workers included; only
    the driver should act on it (checkpoint, stop the components, exit 0), so its workers ignore it."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: this worker was not started by a local nanny
        pass


class BusPlugin(WorkerPlugin):
    """Installs the topic bus, shared-memory RPC handlers and the leftover-segment sweep on each worker."""

    name = PLUGIN_NAME
    idempotent = True  # a second run on the same cluster shares the one bus

    def __init__(self, preload_torch: bool = True, owner_pid: int | None = None) -> None:
        self.preload_torch = preload_torch
        self.owner_pid = owner_pid  # embedded clusters: the driver; when it dies (even SIGKILL), so do we

    async def setup(self, worker) -> None:
        global _current
        if self.preload_torch:
            try:  # the first torch payload would otherwise pay the import (0.1-1.4 s)
                import torch  # noqa: F401
            except ImportError:
                pass
        import daskrl  # noqa: F401  (so user classes unpickle with daskrl importable)

        shm.sweep(dead_only=True)  # leftovers of processes that died (SIGKILL, crashed runs)
        bus = Bus(worker)
        _current = bus
        worker.stream_handlers[STREAM_OP] = bus.on_stream
        worker.handlers["daskrl_bus_routes"] = bus.set_routes
        worker.handlers["daskrl_shm_read"] = shm.serve_read
        worker.handlers["daskrl_shm_write"] = shm.serve_write
        reply = await worker.scheduler.daskrl_bus_hello(address=worker.address)
        bus.set_routes(reply["routes"], reply["version"])
        threading.Thread(target=_sweep_dead_owners, name="daskrl-shm-sweep", daemon=True).start()
        self._watch = PeriodicCallback(ReleasedComponentWatch(bus, worker).check, 1000)
        self._watch.start()
        if self.owner_pid:
            threading.Thread(target=_exit_with_owner, args=(self.owner_pid,), name="daskrl-owner-watch",
                             daemon=True).start()
            _ignore_terminal_interrupt()

    async def teardown(self, worker) -> None:
        global _current
        if getattr(self, "_watch", None) is not None:
            self._watch.stop()
        bus = _current
        if bus is not None:
            for component in list(bus.components.values()):
                component.close_now()
            await bus.close()
        shm.close_owned()
        _current = None
