"""Recovering from lost components: a dead rollout or inference worker (or sampling sink) is recreated, a dead
learner restarts from the newest checkpoint, or before the first one from the newest parameters the samplers hold.
Every step has a timeout; nothing waits forever.

Why it works: subscriptions live in the scheduler's registry by component *name*, so a component recreated under
the same name (on the restarted worker, which the nanny brings back under the same worker name, or on another live
worker) gets its signals and queues back as soon as it registers. What the registry cannot know, the fleet does:
fresh slot buffers are attached by the learner and the inference workers, a new learner's parameter block is handed
to the samplers, and slots that a dead consumer never handed back are reclaimed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from daskrl.driver.fleet.fleet import Fleet, LearnerStart
from daskrl.driver.fleet.placement import Role
from daskrl.errors import ComponentError, TrainingError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.monitor.console import say
from daskrl.protocol import FAULT_TOPIC, RECOVERIES_TOPIC
from daskrl.runtime import dask_internals
from daskrl.runtime.access.runs import RunClaim
from daskrl.runtime.actors.handles import ComponentHandle, looks_like_a_lost_worker
from daskrl.runtime.actors.incidents import Incidents

#: workers a component is tried on when each one leaves before the component is up
RECREATE_ATTEMPTS = 3
#: seconds a lost learner waits for a worker to restart on (the run cannot go on without it: a batch job that
#: replaces a retired one may take this long to start)
LEARNER_WAIT_S = 60.0


def left_meanwhile(exc: BaseException) -> bool:
    """Whether a failed recreation came from its worker leaving (a lost connection, or Dask's "Worker holding Actor
    was lost"), rather than from the component itself."""
    return looks_like_a_lost_worker(exc) or "Worker holding Actor was lost" in str(exc)


class Recovery:
    """Finds lost components (the registry's fault events) and brings them back through the fleet."""

    def __init__(self, fleet: Fleet, stores: list[CheckpointStore], max_learner_restarts: int,
                 incidents: Incidents, shrink_when_full: bool = False, rollout_wait_s: float = 15.0,
                 claim: RunClaim | None = None, share: bool = False) -> None:
        """``stores``: each policy's checkpoints (by policy).
        ``shrink_when_full`` (elastic runs): a rollout worker lost while no worker is idle is not recreated
        once ``rollout_wait_s`` passed without its worker coming back under its name."""
        self.fleet, self.incidents = fleet, incidents
        self.stores = stores
        self.claim, self.share = claim, share  # a replacement goes on a worker of this run's, or a free one
        self.shrink_when_full, self.rollout_wait_s = shrink_when_full, rollout_wait_s
        self.max_learner_restarts = max_learner_restarts
        self.events_seen = time.time()
        self.recoveries: list[dict[str, Any]] = []
        self.learner_restarts = 0
        #: how long a worker stays (a later Unix time is better), and whether a lost worker left at its planned
        #: retirement (no nanny brings it back): daskrl/driver/changes/retirements.py sets them where workers have lifetimes
        self.prefer: Callable[[str], float] = lambda worker: math.inf
        self.gone_for_good: Callable[[str], bool] = lambda worker: False

    # ---- detection ----

    def lost_components(self) -> set[tuple[str, str]]:
        """(bus name, address) of components the scheduler's registry reported lost since the last call (their
        worker left the cluster); the address tells a lost component from its already-recreated successor."""
        try:
            events = self.fleet.client.get_events(FAULT_TOPIC)
        except Exception as exc:  # the scheduler did not answer this time: the calls to the components still tell
            self.incidents.note("fault-events-unreadable", exc)
            return set()
        lost = {(event["component"], event["address"]) for stamp, event in events
                if stamp > self.events_seen and event.get("event") == "component-lost"}
        if events:
            self.events_seen = max(self.events_seen, max(stamp for stamp, _ in events))
        return lost

    # ---- recovery ----

    def recover(self, handle: ComponentHandle, cause: str, env_steps: int) -> ComponentHandle | None:
        """Recreate ``handle``'s component; returns the new handle (None: not recreated, see ``shrink_when_full``).
        Raises TrainingError when it cannot.
        ``env_steps`` is the run's count so far (a learner restarted without a checkpoint goes on from it)."""
        t0 = time.monotonic()
        role = self.fleet.roster.role_of(handle.name)
        say(f"daskrl: lost {handle.name} ({role.value if role else 'unknown role'} on {handle.address}): {cause}; "
            "recovering")
        if role is None:
            raise TrainingError(f"component {handle.name!r} was lost and is not part of this run's fleet: {cause}")
        planned = self.gone_for_good(handle.address)  # its worker retired as planned: no fault, not counted
        if role is Role.LEARNER and not planned and self.learner_restarts >= self.max_learner_restarts:
            raise TrainingError(
                f"the learner was lost {self.learner_restarts + 1} times (last: {cause}); giving up after "
                f"--max-learner-restarts {self.max_learner_restarts}. The newest checkpoint is intact: continue "
                "with --resume")
        if role is Role.LEARNER and not planned:
            self.learner_restarts += 1
        worker, new = self._recreate_somewhere(handle, role, env_steps)
        if worker is None:
            self.fleet.samplers.forget(handle)
            self._keep({"component": handle.name, "role": role.value, "cause": cause, "worker": None,
                        "recovery_s": round(time.monotonic() - t0, 3), "time": time.time(), "not_recreated": True})
            say(f"daskrl: {handle.name} is not recreated: the cluster has no idle worker; running with "
                f"{len(self.fleet.samplers.rollout)} rollout workers until a worker joins")
            return None
        seconds = time.monotonic() - t0
        worker = new.address if new is not None else worker  # (a relay goes back to its own host, wherever that is)
        self._keep({"component": handle.name, "role": role.value, "cause": cause, "worker": worker,
                    "recovery_s": round(seconds, 3), "time": time.time()})
        say(f"daskrl: recovered {handle.name} on {worker} in {seconds:.2f} s")
        return new

    def _recreate_somewhere(self, handle: ComponentHandle, role: Role, env_steps: int
                            ) -> tuple[str | None, ComponentHandle | None]:
        """Recreate ``handle``'s component on a replacement worker; when that worker leaves too before the component
        is up (a batch job's turnover can take two workers in a row), on another one. (None, None): no worker for it
        (an elastic run goes on with fewer rollout workers rather than crowd a busy process, and grows back later)."""
        for attempt in range(RECREATE_ATTEMPTS):
            worker = self._replacement_worker(handle, wait_s=self.rollout_wait_s if role is Role.ROLLOUT else
                                              LEARNER_WAIT_S if role is Role.LEARNER else 15.0,
                                              only_idle=self.shrink_when_full and role is Role.ROLLOUT
                                              and len(self.fleet.samplers.rollout) > 1)
            if worker is None and role is Role.LEARNER:
                raise TrainingError(f"no worker to restart {handle.name} on within {LEARNER_WAIT_S:g} s: the cluster "
                                    "has none left for this run. The newest checkpoint is intact: continue with "
                                    "--resume on a cluster with workers")
            if worker is None:
                return None, None
            try:
                if role is Role.LEARNER:
                    return worker, self._restart_learner(worker, env_steps, self.fleet.roster.policy_of(handle.name))
                return worker, self.fleet.recreate(handle, worker)
            except ComponentError as exc:
                if attempt + 1 == RECREATE_ATTEMPTS or not left_meanwhile(exc):
                    raise
                say(f"daskrl: {worker} left while {handle.name} was recreated there; trying another worker")
        return None, None

    def _restart_learner(self, worker: str, env_steps: int, policy: int = 0) -> ComponentHandle:
        """From the newest checkpoint (of ``policy``); before the first one, from the newest parameters a sampler
        acts with (what the lost learner published last), which loses only its optimizer state; else from the
        initial weights. Only that policy's learner restarts: the other policies train on."""
        start, said = self.restart_point(env_steps, policy)
        new = self.fleet.recreate_learner(worker, start, policy)
        who = "learner" if len(self.stores) == 1 else f"policy {policy}'s learner"
        say(f"daskrl: {who} restarts from {said}")
        return new

    def restart_point(self, env_steps: int, policy: int) -> tuple[LearnerStart, str]:
        """Where ``policy``'s learner starts again (see :meth:`_restart_learner`), and that said in words."""
        store = self.stores[policy]
        latest = store.latest()
        if latest is not None:
            state = store.load(latest)
            return LearnerStart.from_checkpoint(state), (
                f"{latest.name} ({int(state.get('env_steps', 0)):,} env steps, policy version "
                f"{state.get('policy_version', 0)})")
        weights = self._newest_policy_weights(policy)
        if weights is not None and weights["version"] > 0:
            return LearnerStart.from_weights(weights, env_steps), (
                f"the newest published parameters (policy version {weights['version']}, as the samplers hold them): "
                "no checkpoint was written yet, so its optimizer state starts afresh")
        return LearnerStart(), ("its initial weights (no checkpoint was written, and no sampler holds a published "
                                "version)")

    def _newest_policy_weights(self, policy: int) -> dict[str, Any] | None:
        """The newest ``{"version", "weights"}`` of ``policy`` any sampler acts with (None when none answers): what
        a learner lost before its first checkpoint published last, as far as it reached the samplers."""
        newest = None
        for component in self.fleet.samplers.all():
            try:
                got = component.call("policy_weights", policy, timeout=30)
            except ComponentError:  # a sampler lost at the same time: the others may have it
                continue
            if got is not None and (newest is None or got["version"] > newest["version"]):
                newest = got
        return newest

    def _keep(self, record: dict[str, Any]) -> None:
        self.recoveries.append(record)
        try:
            self.fleet.client.log_event(RECOVERIES_TOPIC, record)
        except Exception as exc:  # the record is in the run's summary; only the dashboard misses it
            self.incidents.note("recovery-event-not-sent", exc)

    def _replacement_worker(self, handle: ComponentHandle, wait_s: float = 15.0, only_idle: bool = False
                            ) -> str | None:
        """The restarted worker with the lost one's name if it comes back in time, else an idle live worker,
        else any live worker (sharing a process beats stopping the run), or with ``only_idle`` None."""
        names = self.fleet.placement.names
        # a worker that retired as planned (a batch job's), or whose nanny went with it (a job cancelled: scancel),
        # never comes back under its name: take another at once instead of waiting for it
        nanny = self.fleet.placement.nannies.get(handle.address)
        back = not self.gone_for_good(handle.address) and dask_internals.nanny_answers(nanny)
        name = names.get(handle.address) if back else None
        deadline = time.monotonic() + wait_s
        while True:
            workers = dask_internals.cluster_workers(self.fleet.client)
            held = self.claim.others() if self.claim is not None and not self.share else {}
            live = {a: w for a, w in workers.items() if a != handle.address and a not in held}  # never another run's
            chosen = next((a for a, info in live.items() if name is not None and str(info.get("name")) == name), None)
            if chosen is None and (name is None or time.monotonic() > deadline):
                chosen = self._idle_or_any(live, only_idle)
            if chosen is not None and self._claimed(chosen):
                self.fleet.placement.know(chosen, live[chosen])  # its name and nanny, should it be lost in turn
                return chosen
            if chosen is None and time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    def _idle_or_any(self, live: dict[str, dict], only_idle: bool) -> str | None:
        """An idle worker of ``live`` (none of this run's components on it); failing that, any of them (sharing a
        process beats stopping the run), or with ``only_idle`` None."""
        busy = {h.address for h in self.fleet.components()}
        idle = sorted((a for a in live if a not in busy), key=lambda a: (-self.prefer(a), a))
        if idle:
            return idle[0]
        return None if only_idle else min(live, key=lambda a: (-self.prefer(a), a), default=None)

    def _claimed(self, worker: str) -> bool:
        """Whether ``worker`` is this run's now (another run may have claimed it a moment before)."""
        return self.claim is None or not self.claim.claim([worker])
