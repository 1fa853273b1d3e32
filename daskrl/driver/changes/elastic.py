"""Elastic runs: the fleet follows the cluster as workers join (an observer of the run's loop).

- **Grow**: a worker that joins the cluster (one the run has not seen) gets a rollout worker, or an inference worker
  when the inference workers are the bottleneck (busy more than :data:`BUSY` of the time), up to
  ``--max-rollout-workers``. A joiner under the name of a worker lost with one of the run's components on it, while
  that loss awaits the recovery, is the recovery's (a nanny restarts a worker under its name); once the recovery
  has dealt with it, or when its worker retired or left in order, the name is free: a batch cluster
  (dask-jobqueue's ``SpecCluster``) gives the job that replaces an ended one the ended job's name.
- **Shrink**: a worker that leaves in order takes its drained rollout workers along (:mod:`.departures`), and the run
  goes on without them; a rollout worker lost with no idle worker left is not recreated until one joins.
- **Adaptive clusters**: the run tells the scheduler how many workers it could use now (its components, plus one
  while more sampling would help: the learner waits for data more than ``1 - BUSY`` of the time), which Dask's
  adaptive scaling takes as a lower bound of its target (``cluster.adapt``, ``daskrl train --adapt MIN:MAX``).
"""

from __future__ import annotations

import time
from typing import Any

from daskrl.config import MAX_ROLLOUT_WORKERS, Config
from daskrl.config.algo_options import OFFLINE_ALGOS
from daskrl.driver.fleet.placement import workers_needed
from daskrl.driver.loop.observers import Observer, Run
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.handles import ComponentHandle

#: a component busier than this share of its time is a bottleneck
BUSY = 0.9
#: seconds between two looks at the cluster's workers
CHECK_EVERY_S = 1.0


def elastic_enabled(config: Config) -> bool:
    """``--elastic`` as given, else on for a run on an existing cluster (``--scheduler``), with ``--adapt`` or on a
    cluster it deploys (``--deploy``: batch jobs start late and end at their walltime); never
    with ``--sync`` (a training step takes every slot of a fixed set), ``--serial`` (nothing joins) nor an offline
    algorithm (no rollout workers to grow)."""
    r = config.run
    if config.learner.sync or r.serial or config.algo.algo in OFFLINE_ALGOS:
        return False
    return bool(r.elastic) if r.elastic is not None else bool(r.scheduler or r.adapt or config.deploy.deploy != "local")


class ElasticGrowth(Observer):
    """See the module docstring: at every poll (it paces itself), workers that joined get components."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []  # what grew, for the run's summary
        self.wanted = 0
        #: workers asked for beyond the run's own fleet (a learner about to move needs a worker that stays): while it
        #: is above 0, workers that join are kept idle (``kept``) for the learner
        self.extra = 0
        self.kept: set[str] = set()
        self.next_check = 0.0

    def on_start(self, run: Run) -> None:
        self.run, self.fleet = run, run.fleet
        self.cap = run.config.run.max_rollout_workers or MAX_ROLLOUT_WORKERS
        self.seen = set(dask_internals.cluster_workers(self.fleet.client))  # present at the start, or already used

    def on_poll(self, run: Run) -> None:
        if time.monotonic() >= self.next_check:
            self.next_check = time.monotonic() + CHECK_EVERY_S
            self.grow(run.state.shares)

    def summary(self) -> dict[str, Any]:
        return {"elastic": list(self.history)}

    def grow(self, shares: dict[str, dict[str, float]]) -> None:
        """Place components on workers that joined since the last look (see the module docstring)."""
        try:
            workers = dask_internals.cluster_workers(self.fleet.client)
        except Exception as exc:
            self.run.incidents.note("elastic-workers-unreadable", exc)
            return
        busy = {h.address for h in self.fleet.components()}
        recovering = self.names_awaiting_recovery(busy, workers)
        joined = sorted((a for a, w in workers.items() if a not in self.seen and a not in busy
                         and str(w.get("name")) not in recovering and w.get("status", "running") == "running"),
                        key=lambda a: str(workers[a].get("name", a)))
        for address in joined:
            if self._wanted_by(shares) and self.run.control.claim.claim([address]):
                continue  # another run holds it: it is that run's to use (and may free it later)
            if self.extra:  # a learner whose worker retires soon goes there (daskrl/driver/changes/retirements.py)
                if address not in self.kept:
                    self.kept.add(address)
                    self.run.say(f"daskrl: worker {address} joined; kept idle for a learner whose worker retires soon")
                continue  # looked at again once no learner waits
            self.seen.add(address)
            self.fleet.placement.know(address, workers[address])
            self._place(address, shares)
        self._publish_wanted(shares)

    def names_awaiting_recovery(self, busy: set[str], workers: dict[str, dict]) -> set[str]:
        """Names of workers that left with one of the run's components (``busy``: their addresses) still on them:
        the recovery has not replaced it yet, and may wait for a worker a nanny restarts under that name."""
        names = self.fleet.placement.names
        return {names[a] for a in busy - set(workers) if a in names}

    def _wanted_by(self, shares: dict[str, dict[str, float]]) -> bool:
        """Whether a joining worker would get a component (see :meth:`_place`)."""
        inference = self.fleet.samplers.inference
        return bool(inference and _busy(inference, shares) > BUSY) or self.room_for_rollout()

    def room_for_rollout(self) -> bool:
        return len(self.fleet.samplers.rollout) < self.cap

    def _place(self, address: str, shares: dict[str, dict[str, float]]) -> None:
        """A rollout worker on ``address`` (claimed for this run), or an inference worker where inference is the
        bottleneck; nothing past --max-rollout-workers."""
        fleet = self.fleet
        shards = len(fleet.replay.shards)
        if fleet.samplers.inference and _busy(fleet.samplers.inference, shares) > BUSY:
            new, why = fleet.add_inference(address), "the inference workers were the bottleneck"
        elif self.room_for_rollout():
            new, why = fleet.add_rollout(address), "more sampling"
        else:
            self.run.say(f"daskrl: worker {address} joined; it stays idle (--max-rollout-workers {self.cap} reached)")
            return
        added = [h.name for h in fleet.replay.shards[shards:]]  # a replay shard for a host that had none
        self.history.append({"event": "grew", "component": new.name, "address": address, "time": time.time(),
                             **({"shards": added} if added else {})})
        with_shard = f" with {', '.join(added)}, its host's new replay shard" if added else ""
        self.run.say(f"daskrl: worker {address} joined: {new.name} placed there{with_shard} ({why}); now "
                     f"{len(fleet.samplers.rollout)} rollout and {len(fleet.samplers.inference)} inference workers")

    def _publish_wanted(self, shares: dict[str, dict[str, float]]) -> None:
        """Tell the scheduler how many workers this run could use now (an adaptive cluster's lower bound): at least
        the fleet its configuration asks for, so that workers which leave (batch jobs at the end of their lifetime)
        are replaced, one more while more sampling would help, and :attr:`extra` more."""
        more = self.room_for_rollout() and _busy(self.fleet.learners(), shares) < BUSY
        # a relay shares a sampler's worker: it asks for no worker of its own
        running = len(self.fleet.components()) - len(self.fleet.relays.handles())
        wanted = max(running, workers_needed(self.run.config)) + (1 if more else 0) + self.extra
        if wanted == self.wanted:
            return
        try:
            self.fleet.client.sync(self.fleet.client.scheduler.daskrl_set_wanted_workers, n=wanted)
            self.wanted = wanted
        except Exception as exc:
            self.run.incidents.note("wanted-workers-not-sent", exc)


def _busy(handles: list[ComponentHandle], shares: dict[str, dict[str, float]]) -> float:
    """The mean busy share of ``handles`` (0 where none reported one yet)."""
    known = [1.0 - shares[h.name].get("waiting", 0.0) for h in handles if shares.get(h.name)]
    return sum(known) / len(known) if known else 0.0


# ---- --adapt MIN:MAX on the embedded cluster ----


def adapt_range(config: Config) -> tuple[int, int] | None:
    """``--adapt``'s (MIN, MAX) worker counts, MIN raised to what the run needs to start: its learners, inference
    workers and one rollout worker."""
    if not config.run.adapt:
        return None
    low, high = (int(x) for x in config.run.adapt.split(":"))
    fixed = fixed_workers(config)
    return max(low, fixed + 1), max(high, fixed + 1)


def fixed_workers(config: Config) -> int:
    """Workers an adaptive run holds whatever its size: every policy's learners and inference workers (as
    :func:`~daskrl.driver.fleet.placement.role_counts` places them)."""
    return workers_needed(config) - config.sampler.num_workers


def adaptive_start(config: Config) -> Config:
    """An adaptive run starts small: as many rollout workers as MIN workers hold (at least one), unless
    ``--num-workers`` was given; the cluster brings the rest (see :class:`ElasticGrowth`)."""
    bounds = adapt_range(config)
    if bounds is None or "num_workers" in config.explicit():
        return config
    return config.replace(num_workers=bounds[0] - fixed_workers(config))
