"""The topic bus: signals to slots between components, peer to peer over Dask's own comms.

Each worker's :class:`~daskrl.runtime.workers.worker_plugin.WorkerPlugin` keeps one :class:`Bus`: the components living
on that worker, the routing table pushed by the scheduler's :class:`~daskrl.runtime.messaging.registry.BusRegistry`, and
one batched stream per peer worker (a comm opened with ``{"op": "connection_stream"}``, read by the peer's
``stream_handlers``). Several workers in one process (``--serial``) each have their own.

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
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Protocol

from daskrl.errors import PayloadError
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.incidents import Incidents

if TYPE_CHECKING:
    from distributed.batched import BatchedSend

logger = logging.getLogger(__name__)

STREAM_OP = "daskrl-bus"
_NATIVE_SCALARS = (str, int, float, bool, type(None), bytes)


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


class Resident(Protocol):
    """What the bus and the worker's housekeeping need of a component living on the worker (a
    :class:`~daskrl.runtime.actors.component.Component`)."""

    name: str

    def deliver(self, slot_name: str, payload: Any, topic: str = "") -> None:
        """Queue a slot call for the component's own thread (thread-safe)."""

    def close_now(self) -> None:
        """Release what the component owns at once (the worker is closing)."""

    async def stop(self) -> dict:
        """Stop the component's thread and release what it owns."""


class _Peer:
    """The outgoing batched stream to one peer worker, plus what waits while it connects."""

    def __init__(self) -> None:
        self.stream: BatchedSend | None = None
        self.backlog: list = []
        self.connecting = False


class Bus:
    """One worker's endpoint of the topic bus (see module docstring)."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.address: str = worker.address
        self.loop = worker.loop
        self.components: dict[str, Resident] = {}
        self.routes: dict[str, dict] = {}
        self.routes_version = -1
        self._rr: dict[str, int] = defaultdict(int)  # round-robin position per work queue
        self._lock = threading.Lock()
        self._pending: dict[str, list] = defaultdict(list)
        self._flush_scheduled = False
        self._peers: dict[str, _Peer] = {}
        #: messages sent to peers, received from them, delivered within this worker, and dropped (no subscriber,
        #: a receiver that is gone, a peer that cannot be reached); components report these with their stats
        self.counters = {"sent": 0, "received": 0, "local": 0, "dropped": 0, "handler_errors": 0}
        # drops happen in normal operation too (a message to a component that just stopped), so they are
        # logged at info level: the counts in every component's stats are what the runner and dashboard show
        self.incidents = Incidents(logger, f"bus of {self.address}", level=logging.INFO)

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
            self._drop("dropped-no-subscriber", f"nobody takes topic {topic!r}")
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
                    component.deliver(slot, payload, topic)
                    self.counters["local"] += 1
                else:
                    self._drop("dropped-receiver-gone", f"{receiver!r} is no longer on this worker ({topic!r})")
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
                    self.incidents.note("stream-closed", f"to {address}: {exc}")
                    peer.stream = None
            peer.backlog.extend(messages)
            if not peer.connecting:
                peer.connecting = True
                asyncio.ensure_future(self._connect(address, peer))

    async def _connect(self, address: str, peer: _Peer) -> None:
        try:
            stream = await dask_internals.open_batched_stream(address, self.worker, "daskrl-bus")
            backlog, peer.backlog = peer.backlog, []
            if backlog:
                stream.send({"op": STREAM_OP, "m": backlog})
                self.counters["sent"] += len(backlog)
            peer.stream = stream
        except Exception as exc:
            self._drop("dropped-peer-unreachable", f"{address}: {exc}", len(peer.backlog))
            peer.backlog = []
        finally:
            peer.connecting = False

    # ---- receiving ----

    def on_stream(self, m: list, **_: Any) -> None:
        """Stream handler (Dask passes the message's other fields as keywords): hand each message to its
        component. Never raises: that would kill the connection for every component on it."""
        try:
            for receiver, slot, topic, payload in m:
                component = self.components.get(receiver)
                if component is None:
                    self._drop("dropped-receiver-gone", f"{receiver!r} is no longer on this worker ({topic!r})")
                    continue
                component.deliver(slot, payload, topic)
            self.counters["received"] += len(m)
        except Exception as exc:  # pragma: no cover - defensive: a malformed message must not kill the stream
            self.counters["handler_errors"] += 1
            self.incidents.note("malformed-message", exc)

    def _drop(self, kind: str, cause: str, count: int = 1) -> None:
        self.counters["dropped"] += count
        self.incidents.note(kind, cause)

    async def close(self) -> None:
        for address, peer in self._peers.items():
            if peer.stream is not None:
                try:
                    peer.stream.abort()
                except Exception as exc:  # already closed from the other side: nothing left to release
                    self.incidents.note("stream-abort-failed", f"to {address}: {exc}")
        self._peers.clear()
