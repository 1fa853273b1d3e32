"""Components: Dask actors with their own thread, signals, slots, timers and timing statistics.

A component is created on a chosen worker by :func:`~daskrl.runtime.actors.handles.spawn` and driven through ``async``
control methods (``configure``, ``start``, ``stop``, ``stats``, ``collect``) that run on the worker's event loop,
so they never wait behind another actor (a worker has one actor thread for all its actors). Its real work runs
in a thread it owns, the component's own event loop:

- slots (methods marked ``@slot``) run there, one at a time, in arrival order;
- timers (:meth:`add_timer`) run there;
- :meth:`run_once` (the hot loop, e.g. stepping envs) runs there whenever no slot call is waiting;
- control methods that must not race with all that hand work over with :meth:`on_own_thread`.

A subclass is configured with one typed, frozen *setup* (see :mod:`daskrl.setups`) and overrides the ``on_*``
hooks; everything it calls on its base is public and documented below.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import queue
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from daskrl.errors import ComponentError
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.incidents import Incidents
from daskrl.runtime.actors.signals import scoped_name, signals_of, slots_of
from daskrl.runtime.actors.timing import Timing
from daskrl.runtime.memory import shm
from daskrl.runtime.memory.remote_reads import RemoteReads
from daskrl.runtime.messaging.wiring import queue_topic, registry_request
from daskrl.runtime.workers.worker_plugin import bus_of

logger = logging.getLogger(__name__)

#: the scheduler event topic of component errors (the dashboard and the runner read it)
ERROR_TOPIC = "daskrl-errors"
_STOP = object()


class Component:
    """Base class of everything that runs on a worker: rollout and inference workers, the learner, ...

    Subclasses override the ``on_*`` hooks and :meth:`run_once`; they never block the worker's event loop.
    """

    #: seconds a slot-less component waits for messages before re-checking timers and the stop flag
    idle_wait_s = 0.1
    #: seconds of queued messages one turn of the loop handles at most: then ``run_once``, the timers and the
    #: heartbeat get their turn. A component whose next message is always queued (a learner whose replay shards
    #: answer while it trains on their last answer) would otherwise handle up to ``limit`` messages in one turn:
    #: minutes without a timer, reported as silent though it works all the while
    turn_s = 0.1
    #: a loop turn longer than this is reported with the thread's current stack in ``stats()``; kept below any
    #: sensible ``--heartbeat-timeout``, or the runner's "silent" warning would come without the stack
    stack_after_s = 1.0

    def __init__(self, name: str, scope: str = "") -> None:
        """``name``: the component's own name (in statistics and messages); ``scope``: its run's, which keeps it
        and its queues apart from another run's on the same cluster (see :func:`~.signals.scoped_name`)."""
        from distributed import get_worker

        self.name = name
        self.scope = scope
        self.bus_name = scoped_name(scope, name)
        self.worker = get_worker()
        self.bus = bus_of(self.worker)
        self.run_id = "norun"
        self.setup: Any = None
        self.timing = Timing()
        self.counters: dict[str, float] = defaultdict(float)
        self.incidents = Incidents(logger, f"component {name!r}")
        self.errors: list[dict[str, Any]] = []
        self.state = "created"
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._timers: list[list] = []  # [next_due, period, fn]
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._beat = time.monotonic()  # last turn of the component's loop: its heartbeat
        self._owned_arrays: list[shm.SharedArray] = []
        #: reads of other hosts' arrays started ahead and sent in bulk (the learner's batcher reads remote slots so)
        self.remote_reads = RemoteReads(self.worker)
        self.bus.components[self.bus_name] = self

    # ---- hooks for subclasses ----

    def on_configure(self, setup: Any) -> None:
        """Build what the component needs (envs, buffers, models) from its setup. Runs in a worker thread."""

    def on_start(self) -> None:
        """First thing on the component's own thread."""

    def run_once(self) -> bool:
        """One step of the hot loop; return True if work was done (the loop then does not wait for messages)."""
        return False

    def on_stop(self) -> None:
        """Last thing on the component's own thread."""

    def extra_stats(self) -> dict[str, Any]:
        """Component-specific statistics merged into :meth:`stats`; reading them must not change them."""
        return {}

    def take_news(self) -> dict[str, Any]:
        """What happened since the last :meth:`collect` (finished episodes, first reports of errors), handed over
        once: only the runner collects, so a dashboard or a test reading :meth:`stats` never steals it."""
        return {}

    # ---- control methods (async: they run on the worker's event loop) ----

    async def configure(self, run_id: str, setup: Any) -> dict:
        """Build the component from ``setup`` and register it by name with the bus registry."""
        self.run_id, self.setup = run_id, setup
        try:
            await self.on_own_thread(self.on_configure, setup)
        except Exception:  # the caller gets the error in one line; the worker's log keeps where it happened
            logger.exception("component %r (%s) could not be configured", self.name, type(self).__name__)
            raise
        reply = await registry_request(
            self.worker, "daskrl_register_component", name=self.bus_name, address=self.worker.address,
            cls=type(self).__qualname__, signals=signals_of(type(self)), slots=slots_of(type(self)), pid=os.getpid())
        if reply["status"] != "ok":
            raise ComponentError(reply["message"])
        self.state = "configured"
        return {"name": self.name, "address": self.worker.address, "pid": os.getpid()}

    async def start(self) -> str:
        if self._thread is not None:
            return self.state
        self._stopping = False
        ctx = contextvars.copy_context()  # so get_worker()/get_client() work on the component thread
        self._thread = threading.Thread(target=ctx.run, args=(self._main,), name=f"daskrl-{self.name}", daemon=True)
        self.beat()  # the heartbeat counts from here: building envs in on_configure (many Ataris: seconds) is not silence
        self.state = "running"
        self._thread.start()
        return self.state

    async def stop(self, timeout: float = 10.0, unregister: bool = True, release: bool = True,
                   keep_subscriptions: bool = False) -> dict:
        """Stop the thread (after the current slot or step), release shared memory, leave the registry; return
        the final :meth:`collect`. ``release=False`` keeps the shared memory and the registry entry until
        :meth:`release`: a run stops its samplers first, and learners on other hosts may still be reading their last
        slots over comms. ``keep_subscriptions``: the connections to this component's name stay for a successor
        under the same name (a learner that moves to another worker)."""
        self._stopping = True
        self._inbox.put(_STOP)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, timeout)
            if self._thread.is_alive():
                self._record_error("stop", TimeoutError(f"thread still busy after {timeout} s"))
        stats = self._collect()  # the last word includes what nobody collected yet
        if release:
            await self._leave(unregister, keep_subscriptions)
        if self.state != "failed":
            self.state = "stopped"
        return stats

    async def release(self) -> None:
        """Release the shared memory a ``stop(release=False)`` kept, and leave the registry (the worker plugin
        releases the memory at teardown too)."""
        await self._leave(True)

    async def _leave(self, unregister: bool, keep_subscriptions: bool = False) -> None:
        self.close_now()
        if unregister:
            try:
                await registry_request(self.worker, "daskrl_unregister_component", name=self.bus_name,
                                       forget_subscriptions=not keep_subscriptions)
            except Exception as exc:  # the scheduler went first (the cluster is closing): nothing left to tell
                self.incidents.note("unregister-failed", exc)

    async def stats(self) -> dict:
        """A read-only snapshot: any number of observers may ask."""
        return self._stats()

    async def collect(self) -> dict:
        """:meth:`stats` plus :meth:`take_news`; for the one runner that gathers episodes and errors."""
        return self._collect()

    async def get_setup(self) -> Any:
        """The setup this component was configured with (recovery tests compare it across incarnations)."""
        return self.setup

    async def on_own_thread(self, fn: Callable, *args: Any) -> Any:
        """Run ``fn(*args)`` on the component's own thread, ordered with its slots, timers and hot loop (e.g.
        taking a consistent checkpoint between two training steps), and return its result. Before the thread
        starts or after it ends, ``fn`` runs in a worker thread: it is then the only code touching the component.
        This is the one way to run code on the component from outside its thread."""
        if self._thread is None or not self._thread.is_alive():
            ctx = contextvars.copy_context()
            return await asyncio.to_thread(ctx.run, fn, *args)
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put((_invoke, (fn, args, future), ""))
        return await asyncio.wrap_future(future)

    # ---- for subclasses ----

    def put(self, queue_name: str, payload: Any) -> int:
        """Hand ``payload`` to exactly one consumer of work queue ``queue_name``."""
        where = f"component {self.name!r} queue {queue_name!r}"
        return self.bus.publish(queue_topic(queue_name, self.scope), payload, where)

    def beat(self) -> None:
        """Show the heartbeat that the component's thread is alive during one long piece of work (a learner step
        on image batches can take longer than --heartbeat-timeout); the loop beats on every turn by itself."""
        self._beat = time.monotonic()

    def add_timer(self, period_s: float, fn: Callable[[], Any]) -> None:
        """Call ``fn`` every ``period_s`` seconds on the component's thread."""
        self._timers.append([time.monotonic() + period_s, period_s, fn])

    def deliver(self, slot_name: str, payload: Any, topic: str = "") -> None:
        """Queue a call of slot ``slot_name`` for the component's thread (thread-safe: the bus calls it, and so
        may a helper thread of the component, such as the learner's batcher)."""
        self._inbox.put((slot_name, payload, topic))

    def create_array(self, shape: tuple[int, ...], dtype: Any, tag: str) -> shm.SharedArray:
        """A shared-memory array owned by this component: closed and unlinked when it stops."""
        array = shm.SharedArray.create(shape, dtype, self.run_id, tag, address=self.worker.address)
        self._owned_arrays.append(array)
        return array

    def attach_array(self, desc: dict) -> shm.SharedArray | shm.RemoteArray:
        """Another component's array: mapped in place on the same host, over Dask comms from another one."""
        return shm.attach(desc, self.worker.address, self.rpc)

    def rpc(self, address: str, op: str, **kwargs: Any) -> Any:
        """A blocking RPC to another worker's handler, from the component's thread."""

        async def call() -> Any:
            return await getattr(self.worker.rpc(address), op)(**kwargs)

        return dask_internals.run_sync(self.worker.loop, call)

    def log_event(self, topic: str, msg: dict) -> None:
        """Send a low-rate event to the scheduler's event log (thread-safe)."""
        self.worker.loop.add_callback(self.worker.log_event, topic, msg)

    def fail(self, where: str, exc: BaseException) -> None:
        """Stop this component for good, recording why: for errors a slot cannot shrug off (an env that keeps
        raising, a loss that stays NaN). The runner sees ``state == "failed"`` and the message: the error is
        recorded first, since a ``stats()`` call from the event loop may read the state in between."""
        self._record_error(where, exc)
        self.state = "failed"
        self._stopping = True

    # ---- internals ----

    def _main(self) -> None:
        try:
            self.on_start()
            while not self._stopping:
                self._beat = time.monotonic()
                busy = self.run_once()
                wait = 0.0 if busy else self._time_to_next_timer()
                self._process_messages(wait)
                if self._timers:
                    self._run_due_timers()
            self.on_stop()
        except Exception as exc:
            self.fail("main loop", exc)

    def _time_to_next_timer(self) -> float:
        if not self._timers:
            return self.idle_wait_s
        return max(0.0, min(min(t[0] for t in self._timers) - time.monotonic(), self.idle_wait_s))

    def _process_messages(self, wait: float, limit: int = 4096) -> None:
        inbox = self._inbox
        try:
            if wait > 0:
                t0 = time.perf_counter()
                item = inbox.get(timeout=wait)
                self.timing.add("waiting", time.perf_counter() - t0)
            else:
                item = inbox.get_nowait()
        except queue.Empty:
            if wait > 0:
                self.timing.add("waiting", wait)
            return
        turn_ends = time.monotonic() + self.turn_s
        for n in range(limit):
            if n and self._stopping:  # fail() or stop(): nothing more runs, queued or not
                return
            if n and time.monotonic() > turn_ends:  # the turn is over: the rest waits for the next one
                return
            if n:
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    return
            if item is _STOP:
                self._stopping = True
                return
            target, payload, topic = item
            try:
                if callable(target):
                    target(payload)
                else:
                    getattr(self, target)(payload)
            except Exception as exc:
                self._record_error(f"slot {target!r} (signal {topic or 'direct'!r})", exc)

    def _run_due_timers(self) -> None:
        now = time.monotonic()
        for timer in self._timers:
            if timer[0] <= now:
                timer[0] = now + timer[1]
                try:
                    timer[2]()
                except Exception as exc:
                    self._record_error(f"timer {getattr(timer[2], '__name__', timer[2])!r}", exc)

    def _record_error(self, where: str, exc: BaseException) -> None:
        summary = traceback.format_exception_only(type(exc), exc)[-1].strip()
        if len(summary) > 400:  # one readable line, not a dump of the offending value
            summary = summary[:400] + " ..."
        frames = traceback.extract_tb(exc.__traceback__)
        at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        message = f"component {self.name!r} ({type(self).__name__}): {where} raised {summary}"
        error = {"component": self.name, "where": where, "error": summary, "at": at,
                 "message": message, "time": time.time()}
        self.counters["errors"] += 1
        if len(self.errors) < 100:
            self.errors.append(error)
        logger.error("%s (at %s)", message, at, exc_info=exc)
        try:
            self.log_event(ERROR_TOPIC, error)
        except Exception as event_exc:  # the event loop is closing: the error itself is recorded above
            self.incidents.note("error-event-not-sent", event_exc)

    def _collect(self) -> dict:
        return {**self._stats(), **(self.take_news() if self.state != "created" else {})}

    def _stats(self) -> dict:
        out = {
            "name": self.name,
            "cls": type(self).__name__,
            "state": self.state,
            "address": self.worker.address,
            "pid": os.getpid(),
            "timing": self.timing.summary(),
            "counters": dict(self.counters),
            "incidents": self.incidents.snapshot(),
            "bus": dict(self.bus.counters),
            "errors": list(self.errors[-10:]),
            "error_count": int(self.counters.get("errors", 0)),
            "heartbeat_age_s": time.monotonic() - self._beat if self.state == "running" else 0.0,
        }
        if out["heartbeat_age_s"] > self.stack_after_s:
            out["stack"] = self.current_stack()
        if self.state != "created":  # a component whose configure failed has none of its own yet
            out.update(self.extra_stats())
        return out

    def current_stack(self) -> list[str]:
        """What the component's thread is doing right now (Dask's own call-stack formatting)."""
        frame = sys._current_frames().get(self._thread.ident) if self._thread is not None else None
        return dask_internals.call_stack(frame) if frame is not None else []

    def close_now(self) -> None:
        """Release everything this component owns (also called by the worker plugin at teardown)."""
        for array in self._owned_arrays:
            array.close()
        self._owned_arrays.clear()
        self.bus.components.pop(self.bus_name, None)


def _invoke(call: tuple) -> None:
    """Run one :meth:`Component.on_own_thread` call on the component's thread and hand back its result."""
    fn, args, future = call
    try:
        future.set_result(fn(*args))
    except Exception as exc:
        future.set_exception(exc)
