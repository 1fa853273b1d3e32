"""Elastic runs: the fleet follows the cluster as workers join and leave.

- **Grow**: a worker that joins the cluster (one the run has not seen, under a name it has not seen: a worker a
  nanny restarts under a known name is the recovery's) gets a rollout worker, or an inference worker when the
  inference workers are the bottleneck (busy more than :data:`BUSY` of the time), up to ``--max-rollout-workers``.
- **Shrink gracefully**: a worker that closes in order (``dask worker`` got SIGTERM, ``client.retire_workers``, an
  adaptive cluster scaling down) drains its rollout workers first (the worker plugin's teardown) and reports them on
  :data:`~daskrl.runtime.registry.LEAVING_TOPIC` with their final statistics, so not a slot is lost; the run stops
  polling a leaving worker and forgets its components once they have retired.
- **Adaptive clusters**: the run tells the scheduler how many workers it could use now (its components, plus one
  while more sampling would help: the learner waits for data more than ``1 - BUSY`` of the time), which Dask's
  adaptive scaling takes as a lower bound of its target (``cluster.adapt``, ``daskrl train --adapt MIN:MAX``).

An abrupt loss stays the recovery's (:mod:`daskrl.recovery`): in an elastic run a rollout worker lost with no idle
worker left is not recreated until one joins.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from daskrl.config import MAX_ROLLOUT_WORKERS, Config
from daskrl.runtime.handles import ComponentHandle
from daskrl.runtime.incidents import Incidents
from daskrl.runtime.registry import LEAVING_TOPIC

if TYPE_CHECKING:  # torch-heavy: the runner imports this module before torch (see runner._train_locked)
    from daskrl.fleet import Fleet

#: a component busier than this share of its time is a bottleneck
BUSY = 0.9
#: seconds between two looks at the cluster's workers
CHECK_EVERY_S = 1.0
#: seconds a leaving worker's components get to report that they retired before they count as lost
LEAVING_GRACE_S = 15.0


def elastic_enabled(config: Config) -> bool:
    """``--elastic`` as given, else on for a run on an existing cluster (``--scheduler``) or with ``--adapt``; never
    with ``--sync`` (a training step takes every slot of a fixed set) nor ``--serial`` (nothing joins)."""
    r = config.run
    if config.learner.sync or r.serial:
        return False
    return bool(r.elastic) if r.elastic is not None else bool(r.scheduler or r.adapt)


class Elastic:
    """See the module docstring. ``poll`` once per runner poll; ``grow`` as often as it likes (it paces itself)."""

    def __init__(self, fleet: Fleet, config: Config, enabled: bool, say: Callable[[str], None],
                 incidents: Incidents) -> None:
        self.fleet, self.config, self.enabled, self.say, self.incidents = fleet, config, enabled, say, incidents
        self.cap = config.run.max_rollout_workers or MAX_ROLLOUT_WORKERS
        workers = fleet.client.scheduler_info()["workers"]
        self.seen = set(workers)  # addresses present at the start, or already used
        self.seen_names = {str(w.get("name")) for w in workers.values()} | set(fleet.placement.names.values())
        self.leaving: dict[str, float] = {}  # address -> when its worker said it is closing
        self.events_seen = time.time()
        self.next_check = 0.0
        self.history: list[dict[str, Any]] = []  # grew / retired / shrank, for the run's summary
        self.wanted = 0

    # ---- leaving workers ----

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
            elif event.get("event") == "retired":
                handle = self._handle(event["component"], event["address"])
                if handle is None:
                    continue
                stats = event.get("stats") or {}
                retired.append({**event, "handle": handle})
                self._record("retired", handle.name, event["address"], drained=bool(stats.get("drained")),
                             slots_filled=stats.get("slots_filled"))
                drained = "drained" if stats.get("drained") else "not fully drained in time"
                self.say(f"daskrl: {handle.name} left with its worker {event['address']} after handing over its "
                         f"{stats.get('slots_filled', 0):,} filled slots ({drained})")
        return retired

    def closing(self, handle: ComponentHandle) -> bool:
        """Whether ``handle``'s worker is closing in order, as the scheduler sees it (asked when a call to the
        component failed: a closing worker refuses calls before its teardown reports it leaving)."""
        try:
            info = self.fleet.client.scheduler_info()["workers"].get(handle.address)
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

    # ---- joining workers ----

    def grow(self, shares: dict[str, dict[str, float]]) -> None:
        """Place components on workers that joined since the last look (see the module docstring)."""
        if not self.enabled or time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + CHECK_EVERY_S
        try:
            workers = self.fleet.client.scheduler_info()["workers"]
        except Exception as exc:
            self.incidents.note("elastic-workers-unreadable", exc)
            return
        busy = {h.address for h in self.fleet.components()}
        joined = sorted((a for a, w in workers.items() if a not in self.seen and a not in busy
                         and str(w.get("name")) not in self.seen_names and w.get("status", "running") == "running"),
                        key=lambda a: str(workers[a].get("name", a)))
        for address in joined:
            self.seen.add(address)
            self.seen_names.add(str(workers[address].get("name")))
            self.fleet.placement.names[address] = str(workers[address].get("name", address))
            self._place(address, shares)
        self._publish_wanted(shares)

    def room_for_rollout(self) -> bool:
        return len(self.fleet.rollout) < self.cap

    def _place(self, address: str, shares: dict[str, dict[str, float]]) -> None:
        fleet = self.fleet
        if fleet.inference and self._busy(fleet.inference, shares) > BUSY:
            new, why = fleet.add_inference(address), "the inference workers were the bottleneck"
        elif self.room_for_rollout():
            new, why = fleet.add_rollout(address), "more sampling"
        else:
            self.say(f"daskrl: worker {address} joined; it stays idle (--max-rollout-workers {self.cap} reached)")
            return
        self._record("grew", new.name, address)
        self.say(f"daskrl: worker {address} joined: {new.name} placed there ({why}); now {len(fleet.rollout)} rollout "
                 f"and {len(fleet.inference)} inference workers")

    def _publish_wanted(self, shares: dict[str, dict[str, float]]) -> None:
        """Tell the scheduler how many workers this run could use now (an adaptive cluster's lower bound)."""
        learners = [h for h in (self.fleet.learner,) if h is not None] + self.fleet.learner_members
        more = self.room_for_rollout() and (not learners or self._busy(learners, shares) < BUSY)
        wanted = len(self.fleet.components()) + (1 if more else 0)
        if wanted == self.wanted:
            return
        try:
            self.fleet.client.sync(self.fleet.client.scheduler.daskrl_set_wanted_workers, n=wanted)
            self.wanted = wanted
        except Exception as exc:
            self.incidents.note("wanted-workers-not-sent", exc)

    # ---- internals ----

    def _handle(self, name: str, address: str) -> ComponentHandle | None:
        return next((h for h in self.fleet.components() if h.name == name and h.address == address), None)

    @staticmethod
    def _busy(handles: list[ComponentHandle], shares: dict[str, dict[str, float]]) -> float:
        known = [1.0 - shares[h.name].get("waiting", 0.0) for h in handles if shares.get(h.name)]
        return sum(known) / len(known) if known else 0.0

    def _record(self, event: str, component: str, address: str, **extra: Any) -> None:
        self.history.append({"event": event, "component": component, "address": address, "time": time.time(),
                             **extra})



# ---- --adapt MIN:MAX on the embedded cluster ----


def adapt_range(config: Config) -> tuple[int, int] | None:
    """``--adapt``'s (MIN, MAX) worker counts, MIN raised to what the run needs to start: its learners, inference
    workers and one rollout worker."""
    if not config.run.adapt:
        return None
    low, high = (int(x) for x in config.run.adapt.split(":"))
    s = config.sampler
    fixed = config.learner.num_learners + (s.num_inference_workers if s.inference == "remote" else 0)
    return max(low, fixed + 1), max(high, fixed + 1)


def adaptive_start(config: Config) -> Config:
    """An adaptive run starts small: as many rollout workers as MIN workers hold (at least one), unless
    ``--num-workers`` was given; the cluster brings the rest (see :class:`Elastic`)."""
    bounds = adapt_range(config)
    if bounds is None or "num_workers" in config.explicit():
        return config
    s = config.sampler
    fixed = config.learner.num_learners + (s.num_inference_workers if s.inference == "remote" else 0)
    return config.replace(num_workers=bounds[0] - fixed)
