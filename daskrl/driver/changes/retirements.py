"""Workers that say when they will leave (``dask worker --lifetime``: how dask-jobqueue ends a batch job's workers
before its walltime, so that ``cluster.adapt`` starts new jobs in time), and the learners that must not leave with
them.

A rollout worker on a retiring worker drains as its worker closes (:mod:`.departures`): nothing to do ahead. A
learner cannot drain (its state is the run's), and letting it go with its worker would make a planned departure a
loss, recovered from a checkpoint that may be minutes old. So:

- from :data:`LOOK_AHEAD_S` before its worker's retirement, while no worker of the run stays at least
  :data:`MOVE_AHEAD_S` longer, the run keeps the next worker that joins idle for it, and asks the cluster for one
  more (an adaptive cluster below its maximum starts a job);
- :data:`MOVE_AHEAD_S` before the retirement the learner moves to the best place there is: a worker that stays that
  much longer, an idle one first (else one whose rollout worker drains to make room), the one that stays longest
  first; failing that, any worker that outlives its own (it may move again); failing that too, it writes a checkpoint
  :data:`LAST_CHECKPOINT_S` before its worker leaves, and restarts from it once a worker is there.

A move is a checkpoint taken now, the learner started from it on the new worker, the old one stopped: one line, and
a row of the run's summary (``learner_moves``). A restart after a retirement is no fault (it does not count against
``--max-learner-restarts``), waits for no nanny to bring the worker back under its name (a retired batch job's
worker never comes back) and prefers workers that stay longest. A worker without a lifetime never moves anything;
a job cancelled without notice (``scancel``, preemption) is a loss, recovered as any (:mod:`.recovery`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from daskrl.driver.changes.elastic import ElasticGrowth
from daskrl.driver.fleet.learner_start import LearnerStart
from daskrl.driver.fleet.placement import Role
from daskrl.driver.loop.component_ledger import account_retired
from daskrl.driver.loop.observers import Observer
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.sampling.episode import episodes_from_event

if TYPE_CHECKING:
    from daskrl.driver.loop.live_run import Run

#: seconds before its worker's planned retirement a learner moves at the latest: a move takes a few seconds, and the
#: estimate of the retirement (daskrl.runtime.dask_internals.worker_retirements) is a second or two early, never late
MOVE_AHEAD_S = 45.0
#: seconds before the retirement the run starts to look for a place (and keeps a joining worker for it)
LOOK_AHEAD_S = 90.0
#: how often the run looks for retirements (asking only the workers it has not asked yet)
CHECK_EVERY_S = 2.0
#: seconds before the retirement a learner with nowhere to go writes the checkpoint it will restart from
LAST_CHECKPOINT_S = 8.0


class StepClock:
    """Seconds each step of a move took (``marks``), and all of them (``total``)."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.marks[name] = round(now - self.last, 3)
        self.last = now

    def total(self) -> float:
        return time.monotonic() - self.start


class PlannedRetirements(Observer):
    """See the module docstring. ``growth``: the run's elastic growth, which keeps a joining worker idle for a
    learner that needs one (:attr:`ElasticGrowth.extra`)."""

    def __init__(self, growth: ElasticGrowth) -> None:
        self.growth = growth
        self.retires_at: dict[str, float | None] = {}  # worker address -> its planned retirement (Unix time)
        self.gone: dict[str, float | None] = {}  # the same for workers that have left
        self.next_check = 0.0
        self.moves: list[dict[str, Any]] = []
        self.warned: set[str] = set()
        self.saved: set[str] = set()

    def on_start(self, run: Run) -> None:
        run.care.recovery.prefer = self.stays_until
        run.care.recovery.gone_for_good = self.retired

    def on_poll(self, run: Run) -> None:
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + CHECK_EVERY_S
        try:
            self._learn_retirements(run)
        except Exception as exc:  # the scheduler or a worker did not answer: asked again at the next check
            run.incidents.note("retirements-unreadable", exc)
            return
        waiting = 0
        for policy, learner in enumerate(list(run.fleet.teams.leaders)):
            at = self.retires_at.get(learner.address)
            if at is None or at - time.time() > LOOK_AHEAD_S:
                continue
            if at - time.time() < MOVE_AHEAD_S:
                self.move(run, policy, learner, at)
            elif not self._stays(self._target(run, learner.address, at), at):
                waiting += 1  # no place that stays yet: the next worker that joins is kept for it
        self.growth.extra = waiting

    def summary(self) -> dict[str, Any]:
        return {"learner_moves": list(self.moves)}

    def stays_until(self, worker: str) -> float:
        """When ``worker`` retires (infinity: never, as far as the run knows)."""
        at = self.retires_at.get(worker)
        return math.inf if at is None else at

    def retired(self, worker: str) -> bool:
        """Whether ``worker`` left at its planned retirement (it comes back under no name)."""
        at = self.retires_at.get(worker, self.gone.get(worker))
        return at is not None and at <= time.time() + MOVE_AHEAD_S

    def _learn_retirements(self, run: Run) -> None:
        workers = {a: w for a, w in dask_internals.cluster_workers(run.fleet.client).items()
                   if w.get("status", "running") == "running"}  # one already closing is no place to go
        self.gone.update({a: t for a, t in self.retires_at.items() if a not in workers})
        self.retires_at = {a: t for a, t in self.retires_at.items() if a in workers}
        unknown = [a for a in workers if a not in self.retires_at]
        self.retires_at.update(dask_internals.worker_retirements(run.fleet.client, unknown))

    def move(self, run: Run, policy: int, learner: ComponentHandle, retires_at: float) -> None:
        """Move ``policy``'s learner off its retiring worker (see the module docstring)."""
        target = self._target(run, learner.address, retires_at)
        if target is None:
            if learner.address not in self.warned:
                self.warned.add(learner.address)
                run.warn(f"{learner.name}'s worker {learner.address} retires in {retires_at - time.time():.0f} s "
                         "and no worker of the run outlives it yet: unless one joins in time, the learner restarts "
                         "from a checkpoint taken just before its worker leaves")
            if retires_at - time.time() < LAST_CHECKPOINT_S and learner.address not in self.saved:
                self.saved.add(learner.address)
                run.checkpoint()  # what the restart goes on from: seconds old, not minutes
            return
        steps = StepClock()
        room = self._make_room(run, target)
        steps.mark("drain_s")
        state = run.checkpoint()[policy]  # the state the learner goes on from: nothing it learned is lost
        start = LearnerStart.from_checkpoint_bytes(state)
        said = f"a checkpoint taken at {run.state.env_steps:,} env steps"
        steps.mark("checkpoint_s")
        # its name stays in the bus registry: the rollout workers' connections to "learner" are the successor's;
        # its last statistics count what it took since the last poll (the successor's end them in the data path)
        run.ledger.keep([learner.call("stop", timeout=30, keep_subscriptions=True)])
        steps.mark("stop_s")
        try:
            new = run.fleet.recreate_learner(target, start, policy)
        except Exception as exc:  # the target left meanwhile: a restart wherever the recovery finds room
            run.care.replace(run, learner, f"its move to {target} failed ({exc})")
            return
        steps.mark("start_s")
        seconds = steps.total()
        self.moves.append({"component": learner.name, "from": learner.address, "to": new.address,
                           "move_s": round(seconds, 3), "retires_in_s": round(retires_at - time.time(), 1),
                           "made_room_by_draining": room, "time": time.time(), **steps.marks})
        run.say(f"daskrl: {learner.name} moved from {learner.address} (retiring in {retires_at - time.time():.0f} s) "
                f"to {new.address}{f' in place of {room}' if room else ''} in {seconds:.2f} s, from {said}")

    def _target(self, run: Run, leaving: str, retires_at: float) -> str | None:
        """The best place now: a worker that stays :data:`MOVE_AHEAD_S` longer, idle first, the one that stays
        longest first; failing that, any that outlives ``leaving`` (the learner may move again); None when none
        does. A worker with a rollout worker counts (it drains to make room) unless that is the run's last one; a
        worker with anything else does not."""
        held = run.control.claim.others() if run.control.claim is not None else {}
        busy = {h.address for h in run.fleet.components()}
        # a rollout worker drains to make room, unless it is the last one (the run would stop sampling)
        movable = {h.address for h in run.fleet.samplers.rollout} if len(run.fleet.samplers.rollout) > 1 else set()
        later = [a for a in self.retires_at if a != leaving and a not in held and (a not in busy or a in movable)
                 and self.stays_until(a) > retires_at + CHECK_EVERY_S]
        return max(later, key=lambda a: (self._stays(a, retires_at), a not in busy, self.stays_until(a)), default=None)

    def _stays(self, worker: str | None, than: float) -> bool:
        """Whether ``worker`` outlives ``than`` by :data:`MOVE_AHEAD_S` (the learner will not move again soon)."""
        return worker is not None and self.stays_until(worker) > than + MOVE_AHEAD_S

    @staticmethod
    def _make_room(run: Run, worker: str) -> str:
        """Drain the rollout worker on ``worker``, if there is one (its slots all reach the learner first); its
        name, or ''."""
        rollout = next((h for h in run.fleet.samplers.rollout if h.address == worker), None)
        if rollout is None or run.fleet.roster.role_of(rollout.name) is not Role.ROLLOUT:
            return ""
        final = rollout.call("drain", 10.0, timeout=30)
        final["episodes"] = episodes_from_event(final.get("episodes", []))  # records again, not sequences
        account_retired(run, rollout, final)
        run.fleet.samplers.forget(rollout)
        return rollout.name
