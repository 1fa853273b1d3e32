"""Steering a live run from outside its loop: new hyperparameters, more or fewer rollout workers, a stop.

A run handle (``daskrl.start``), or a handle attached from another process through the scheduler, asks; the
run's own loop does it, between two polls, so nothing races the loop's own use of the fleet. Each request is a
function of the run, queued here and answered through a ``Future``.

- :func:`set_hyperparams`: every policy's learner takes the values on its own thread between two training steps
  (so no step mixes old and new values), and the change is an event in ``events.csv``, TensorBoard and the
  dashboard.
- :func:`adopt_training_state`: continue from another run's training state (PBT across a sweep's trials).
- :func:`scale_rollout`: grow onto workers no run holds (claimed first) or drain the newest rollout workers, within
  what the cluster holds.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from daskrl.config import Config
from daskrl.config.hyperparams import checked
from daskrl.driver.loop.component_ledger import account_retired
from daskrl.monitor.run_state import RunState
from daskrl.protocol import EVENTS_TOPIC
from daskrl.runtime import dask_internals
from daskrl.runtime.access.runs import RunClaim

if TYPE_CHECKING:  # torch-heavy: the components' classes
    from daskrl.driver.fleet.fleet import Fleet


class Control(Protocol):
    """What steering uses of a run's control (:class:`daskrl.driver.loop.run_control.RunControl`, which imports
    this module)."""

    claim: RunClaim
    steering: Steering


class Outputs(Protocol):
    """What steering uses of a run's outputs (:class:`daskrl.driver.loop.run_outputs.RunOutputs`)."""

    def event(self, time_s: float, env_steps: int, event: str, detail: dict[str, Any]) -> None: ...


class Run(Protocol):
    """What steering uses of a live run (:class:`daskrl.driver.loop.live_run.Run`)."""

    config: Config
    client: Any
    fleet: Fleet
    control: Control
    state: RunState
    outputs: Outputs

    def warn(self, message: str) -> None: ...

    def log_event(self, topic: str, msg: dict) -> None: ...

    def request_stop(self, reason: str) -> None: ...

    def checkpoint(self) -> None: ...

#: seconds a learner may take to take new hyperparameters (it waits for the training step in progress)
SET_TIMEOUT_S = 120
#: seconds a rollout worker gets to hand back its slots when the run scales down
DRAIN_TIMEOUT_S = 10.0


class Steering:
    """The requests waiting for the run's loop (see the module docstring)."""

    def __init__(self) -> None:
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = ""

    def submit(self, fn: Callable[[Run], Any]) -> Future:
        """Queue ``fn(run)`` for the loop; its result (or error) comes in the returned future."""
        future: Future = Future()
        if self.closed:
            future.set_exception(RuntimeError(f"the run has stopped ({self.closed})"))
        else:
            self.pending.put((fn, future))
        return future

    def run_pending(self, run: Run) -> None:
        """Carry out every queued request (on the loop's thread)."""
        while True:
            try:
                fn, future = self.pending.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(fn(run))
            except Exception as exc:  # the caller reads it; the run goes on
                future.set_exception(exc)

    def close(self, reason: str) -> None:
        """The loop ended: requests still waiting, and any that come later, fail with ``reason``."""
        self.closed = reason or "stopped"
        while True:
            try:
                _, future = self.pending.get_nowait()
            except queue.Empty:
                return
            future.set_exception(RuntimeError(f"the run has stopped ({self.closed})"))


def set_hyperparams(run: Run, values: dict[str, float]) -> dict[str, float]:
    """Every policy's learner trains with ``values`` from its next step on; returns policy 0's hyperparameters
    now. The change is logged as an event."""
    values = checked(values)
    now = [learner.call("set_hyperparams", values, timeout=SET_TIMEOUT_S) for learner in run.fleet.teams.leaders]
    run.fleet.teams.form_group()  # a group's members take the leader's whole state, its new values included
    record_event(run, "set", {**values, "after_train_step": now[0].get("after_train_step", 0) if now else 0})
    return now[0] if now else {}


def adopt_training_state(run: Run, state: dict, values: dict[str, float], source: str) -> int:
    """Continue from another run's exported training state (weights, optimizer, normalizers) with ``values``
    (PBT across a sweep's trials): every policy's learner loads it between two steps; ``config.json`` and a
    checkpoint taken at once hold the new hyperparameters, so a restore trains with what the run trained with.
    Returns policy 0's new version."""
    values = checked(values)
    versions = [learner.call("import_training_state", state, values, timeout=SET_TIMEOUT_S)
                for learner in run.fleet.teams.leaders]
    run.fleet.teams.form_group()
    run.config = run.config.replace(**values)
    with open(os.path.join(run.config.experiment_dir, "config.json"), "w") as f:
        f.write(run.config.to_json())
    run.checkpoint()
    record_event(run, "exploit", {**values, "source": source})
    return versions[0] if versions else 0


def scale_rollout(run: Run, target: int) -> dict[str, Any]:
    """Grow to (or shrink to) ``target`` rollout workers, as far as the cluster's free workers allow; returns
    ``{"rollout_workers", "asked", "added", "removed"}``."""
    if run.state.counts_updates:
        raise ValueError(f"an offline run (--algo {run.config.algo.algo}) trains from its dataset alone: it has no "
                         "rollout workers to scale")
    if target < 1:
        raise ValueError(f"a run needs at least one rollout worker (asked for {target})")
    fleet = run.fleet
    added = removed = 0
    while len(fleet.samplers.rollout) < target and (worker := _free_worker(run)) is not None:
        fleet.add_rollout(worker)
        added += 1
    while len(fleet.samplers.rollout) > target:
        retire_rollout(run, fleet.samplers.rollout[-1])
        removed += 1
    result = {"rollout_workers": len(fleet.samplers.rollout), "asked": target, "added": added, "removed": removed}
    record_event(run, "scale", result)
    if len(fleet.samplers.rollout) < target:
        run.warn(f"scaled to {len(fleet.samplers.rollout)} rollout workers of the {target} asked: the cluster has no "
                 "more free workers")
    return result


def retire_rollout(run: Run, handle: Any) -> None:
    """Drain a rollout worker (its slots handed back, its last steps and episodes counted), stop it and free its
    worker for other runs."""
    final = handle.call("drain", DRAIN_TIMEOUT_S, timeout=DRAIN_TIMEOUT_S + 30)
    account_retired(run, handle, final)
    run.fleet.samplers.forget(handle)
    if not any(h.address == handle.address for h in run.fleet.components()):
        run.control.claim.release([handle.address])


def _free_worker(run: Run) -> str | None:
    """A worker none of this run's components uses and no other run holds (claimed for this run), or None."""
    workers = dask_internals.cluster_workers(run.client)
    busy = {h.address for h in run.fleet.components()}
    held = {} if run.config.run.share_workers else run.control.claim.others()
    for address in sorted(workers, key=lambda a: str(workers[a].get("name", a))):
        if address not in busy and address not in held and workers[address].get("status", "running") == "running" \
                and not run.control.claim.claim([address]):
            run.fleet.placement.know(address, workers[address])
            return address
    return None


def record_event(run: Run, event: str, detail: dict[str, Any]) -> None:
    """An event in the run's ``events.csv`` and TensorBoard (:meth:`.run_outputs.RunOutputs.event`) and on the
    dashboard."""
    state = run.state
    time_s, env_steps = round(state.elapsed + state.elapsed_offset, 3), state.env_steps
    run.outputs.event(time_s, env_steps, event, detail)
    run.log_event(EVENTS_TOPIC, {"run": run.config.run.experiment, "event": event, "time_s": time_s,
                                 "env_steps": env_steps, "detail": detail, "time": time.time()})


def apply_remote(run: Run, command: dict[str, Any]) -> None:
    """A request an attached handle sent through the scheduler: stop, set or scale."""
    op = command.get("op")
    if op == "stop":
        run.request_stop(command.get("reason") or "stopped by an attached handle")
    elif op == "set":
        run.control.steering.submit(lambda r: set_hyperparams(r, command.get("values", {})))
    elif op == "scale":
        run.control.steering.submit(lambda r: scale_rollout(r, int(command.get("rollout_workers", 0))))
    else:
        run.warn(f"an attached handle asked for {op!r}, which a run does not do (stop, set, scale)")


__all__ = ["Steering", "adopt_training_state", "apply_remote", "record_event", "retire_rollout", "scale_rollout",
           "set_hyperparams"]
