"""The scheduler side of the topic bus: which component lives where, and who listens to which topic.

A small SchedulerPlugin keeps two tables and pushes the derived routing table to every worker that runs the
bus after each change (a few per run, not per message: messages then go worker to worker):

- components: name -> address, class, signals, slots (registered when a component is configured);
- subscriptions: topic -> mode ("broadcast" for signals, "one" for work queues) and (receiver, slot) pairs.

Subscriptions are kept by component *name*, so a component recreated on another worker (after a crash) gets
its traffic again as soon as it registers. The plugin also reports lost components when a worker leaves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from daskrl.runtime import dask_internals

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskrl-bus-registry"
#: the scheduler event topic on which the registry reports components lost with their worker
FAULT_TOPIC = "daskrl-faults"
#: a worker leaving gracefully: ``{"event": "leaving", "address"}`` when it starts closing, then
#: ``{"event": "retired", "component", "address", "stats"}`` for each component it drained and stopped
LEAVING_TOPIC = "daskrl-leaving"


class BusRegistry(SchedulerPlugin):
    """Name resolution and subscriptions for the topic bus (see module docstring)."""

    name = PLUGIN_NAME
    idempotent = True  # a second run on the same cluster shares the one bus

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Any]] = {}
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.bus_workers: set[str] = set()
        self.version = 0
        self.wanted_workers = 0  # how many workers the running training could use now (see daskrl.driver.changes.elastic)
        self.scheduler = None
        self._push_lock: asyncio.Lock | None = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler
        self._push_lock = asyncio.Lock()
        handlers = {
            "daskrl_bus_hello": self.hello,
            "daskrl_register_component": self.register_component,
            "daskrl_unregister_component": self.unregister_component,
            "daskrl_subscribe": self.subscribe,
            "daskrl_unsubscribe": self.unsubscribe,
            "daskrl_components": self.list_components,
            "daskrl_set_wanted_workers": self.set_wanted_workers,
        }
        dask_internals.add_scheduler_handlers(scheduler, handlers)
        dask_internals.raise_adaptive_target(scheduler, lambda: self.wanted_workers)

    # ---- handlers (called by workers and clients over RPC) ----

    async def hello(self, address: str) -> dict:
        """A worker's bus plugin starts: remember it and hand it the current routes."""
        self.bus_workers.add(address)
        return {"routes": self.routes(), "version": self.version}

    async def register_component(
        self, name: str, address: str, cls: str, signals: list, slots: list, pid: int = 0
    ) -> dict:
        previous = self.components.get(name)
        if previous and previous["address"] != address and previous["address"] in self.scheduler.workers:
            return {"status": "error", "message": f"a component named {name!r} already runs on {previous['address']}"}
        self.components[name] = {"address": address, "cls": cls, "signals": signals, "slots": slots, "pid": pid}
        await self._push()
        return {"status": "ok"}

    async def unregister_component(self, name: str, forget_subscriptions: bool = True) -> dict:
        self.components.pop(name, None)
        if forget_subscriptions:
            for topic in list(self.subscriptions):
                entry = self.subscriptions[topic]
                entry["subs"] = [s for s in entry["subs"] if s[0] != name]
                if not entry["subs"] or topic.startswith(name + "."):  # its own signals go with it
                    del self.subscriptions[topic]
        await self._push()
        return {"status": "ok"}

    async def subscribe(
        self, topic: str, receiver: str, slot: str, mode: str = "broadcast",
        sender: str | None = None, signal: str | None = None,
    ) -> dict:
        problem = self._check(topic, receiver, slot, mode, sender, signal)
        if problem:
            return {"status": "error", "message": problem}
        entry = self.subscriptions.setdefault(topic, {"mode": mode, "subs": []})
        if [receiver, slot] not in entry["subs"]:
            entry["subs"].append([receiver, slot])
        await self._push()
        return {"status": "ok"}

    async def unsubscribe(self, topic: str, receiver: str, slot: str) -> dict:
        entry = self.subscriptions.get(topic)
        if entry and [receiver, slot] in entry["subs"]:
            entry["subs"].remove([receiver, slot])
            if not entry["subs"]:
                del self.subscriptions[topic]
            await self._push()
        return {"status": "ok"}

    async def set_wanted_workers(self, n: int) -> dict:
        """The running training could use ``n`` workers now: an adaptive cluster scales to at least that."""
        self.wanted_workers = int(n)
        return {"status": "ok"}

    async def list_components(self) -> dict:
        return {"components": self.components, "subscriptions": self.subscriptions}

    # ---- scheduler events ----

    def remove_worker(self, scheduler, worker: str, **kwargs) -> None:
        self.bus_workers.discard(worker)
        lost = [name for name, info in self.components.items() if info["address"] == worker]
        for name in lost:
            info = self.components.pop(name)
            scheduler.log_event(
                FAULT_TOPIC,
                {"event": "component-lost", "component": name, "cls": info["cls"], "address": worker,
                 "time": time.time(), "cause": f"worker {worker} left the cluster"},
            )
            logger.warning("daskrl component %r (%s) was lost with worker %s", name, info["cls"], worker)
        if lost:
            asyncio.ensure_future(self._push())

    def log_event(self, topic: str, msg: Any) -> None:
        """A retirement (``client.retire_workers``, an adaptive cluster scaling down) that the scheduler refused
        because the worker holds daskrl components, whose actors Dask cannot move: daskrl completes it by asking
        that worker to close itself, so its rollout workers drain first (the worker plugin's teardown)."""
        if not (isinstance(msg, dict) and msg.get("action") == "could-not-retire"):
            return
        if self.scheduler is not None and any(info["address"] == topic for info in self.components.values()):
            logger.info("daskrl: worker %s holds components and was asked to retire: it closes after draining",
                        topic)
            self.scheduler.close_worker(topic)

    def valid_workers_downscaling(self, scheduler, workers: list) -> list:
        """An adaptive cluster picks workers to retire among those with no daskrl component first (Dask would
        otherwise pick a busy rollout worker's, whose retirement then costs its slots' drain)."""
        busy = {info["address"] for info in self.components.values()}
        idle = [ws for ws in workers if ws.address not in busy]
        return idle or workers

    # ---- internals ----

    def _check(self, topic, receiver, slot, mode, sender, signal) -> str | None:
        if mode not in ("broadcast", "one"):
            return f"unknown subscription mode {mode!r} (use 'broadcast' for signals, 'one' for work queues)"
        existing = self.subscriptions.get(topic)
        if existing and existing["mode"] != mode:
            return f"topic {topic!r} is a {existing['mode']!r} topic; it cannot also be used as {mode!r}"
        info = self.components.get(receiver)
        if info is None:
            running = ", ".join(sorted(self.components)) or "none"
            return f"cannot connect to {receiver}.{slot}: no component named {receiver!r} is running (running: {running})"
        if slot not in info["slots"]:
            return (
                f"cannot connect to {receiver}.{slot}: component {receiver!r} ({info['cls']}) has no slot {slot!r}; "
                f"its slots are: {', '.join(info['slots']) or 'none'} (mark slot methods with @slot)"
            )
        if sender is not None and sender in self.components:
            sinfo = self.components[sender]
            if signal not in sinfo["signals"]:
                return (
                    f"cannot connect {sender}.{signal}: component {sender!r} ({sinfo['cls']}) has no signal "
                    f"{signal!r}; its signals are: {', '.join(sinfo['signals']) or 'none'} (declare them with @signal)"
                )
        return None

    def routes(self) -> dict:
        """topic -> {"mode", "subs": [[address, receiver, slot], ...]} for receivers that are running now."""
        table = {}
        for topic, entry in self.subscriptions.items():
            subs = [
                [self.components[r]["address"], r, s] for r, s in entry["subs"] if r in self.components
            ]
            table[topic] = {"mode": entry["mode"], "subs": subs}
        return table

    async def _push(self) -> None:
        """Send the new routing table to every bus worker and wait for all of them (so a connect() that
        returns is in force everywhere)."""
        assert self._push_lock is not None
        async with self._push_lock:
            self.version += 1
            routes, version = self.routes(), self.version
            workers = [w for w in self.bus_workers if w in self.scheduler.workers]

            async def one(address: str) -> None:
                try:
                    await asyncio.wait_for(
                        self.scheduler.rpc(address).daskrl_bus_routes(routes=routes, version=version), 10
                    )
                except Exception as exc:  # a dying worker must not stop the others from updating
                    logger.info("could not update bus routes on %s: %s", address, exc)

            await asyncio.gather(*(one(w) for w in workers))
