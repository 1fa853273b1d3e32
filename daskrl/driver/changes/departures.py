"""Workers that leave the cluster in order, and the rollout workers they take along.

A worker that closes in order (``dask worker`` got SIGTERM, ``client.retire_workers``, an adaptive cluster scaling
down) drains its rollout workers first (the worker plugin's teardown) and reports them on
:data:`~daskrl.runtime.messaging.registry.LEAVING_TOPIC` with their final statistics, so not a slot is lost. The run stops
polling a leaving worker's rollout workers and takes their last report as their retirement: an elastic run goes on
without them, a fixed fleet recreates them elsewhere (see :class:`~daskrl.driver.loop.live_run.Run`). An abrupt loss is the
recovery's (:mod:`daskrl.driver.changes.recovery`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daskrl.driver.fleet.fleet import Fleet
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.actors.incidents import Incidents
from daskrl.runtime.messaging.registry import LEAVING_TOPIC
from daskrl.sampling.episode import episodes_from_event

#: seconds a leaving worker's components get to report that they retired before they count as lost
LEAVING_GRACE_S = 15.0


class Departures:
    """See the module docstring. ``poll`` once per runner poll."""

    def __init__(self, fleet: Fleet, say: Callable[[str], None], incidents: Incidents) -> None:
        self.fleet, self.say, self.incidents = fleet, say, incidents
        self.leaving: dict[str, float] = {}  # address -> when its worker said it is closing
        self.events_seen = time.time()
        self.history: list[dict[str, Any]] = []  # retirements, for the run's summary

    def poll(self) -> list[dict[str, Any]]:
        """Leaving workers and retired components reported since the last call; returns the retirements
        (``{"component", "address", "stats", "handle"}``)."""
        try:
            events = self.fleet.client.get_events(LEAVING_TOPIC)
        except Exception as exc:  # the scheduler did not answer this time: asked again at the next poll
            self.incidents.note("leaving-events-unreadable", exc)
            return []
        fresh = [event for stamp, event in events if stamp > self.events_seen]
        if events:
            self.events_seen = max(self.events_seen, max(stamp for stamp, _ in events))
        retired = []
        for event in fresh:
            if event.get("event") == "leaving":
                self.leaving[event["address"]] = time.monotonic()
            elif event.get("event") == "retired" and (handle := self._handle(event)) is not None:
                stats = dict(event.get("stats") or {})
                stats["episodes"] = episodes_from_event(stats.get("episodes", []))  # records again, not sequences
                retired.append({**event, "stats": stats, "handle": handle})
                self._tell(handle, event["address"], stats)
        return retired

    def closing(self, handle: ComponentHandle) -> bool:
        """Whether ``handle``'s worker is closing in order, as the scheduler sees it (asked when a call to the
        component failed: a closing worker refuses calls before its teardown reports it leaving)."""
        try:
            info = dask_internals.cluster_workers(self.fleet.client).get(handle.address)
        except Exception as exc:
            self.incidents.note("elastic-workers-unreadable", exc)
            return False
        if info is not None and info.get("status") in ("closing", "closing_gracefully"):
            self.leaving.setdefault(handle.address, time.monotonic())
        return self.is_leaving(handle)

    def is_leaving(self, handle: ComponentHandle) -> bool:
        """True while ``handle``'s worker is closing in order and the grace for its retirement report lasts."""
        since = self.leaving.get(handle.address)
        return since is not None and time.monotonic() - since < LEAVING_GRACE_S

    def _handle(self, event: dict[str, Any]) -> ComponentHandle | None:
        return next((h for h in self.fleet.components()
                     if h.bus_name == event["component"] and h.address == event["address"]), None)

    def _tell(self, handle: ComponentHandle, address: str, stats: dict[str, Any]) -> None:
        self.history.append({"event": "retired", "component": handle.name, "address": address, "time": time.time(),
                             "drained": bool(stats.get("drained")), "slots_filled": stats.get("slots_filled")})
        drained = "drained" if stats.get("drained") else "not fully drained in time"
        self.say(f"daskrl: {handle.name} left with its worker {address} after handing over its "
                 f"{stats.get('slots_filled', 0):,} filled slots ({drained})")
