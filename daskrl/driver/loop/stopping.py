"""Stopping a run in order: sampling first (no new data), then the last row with every step sampled, the observers,
a final checkpoint, the learners; the samplers' shared memory last, since learners on other hosts may still be reading
their last slots over comms when sampling stops. Errors are reported, not raised over each other: the first failure is
what the user needs to read."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from daskrl.monitor.console import say
from daskrl.runtime.actors.handles import release_all, stop_all

if TYPE_CHECKING:
    from daskrl.driver.fleet.fleet import Fleet
    from daskrl.driver.loop.component_ledger import ComponentLedger
    from daskrl.driver.loop.observers import Observer
    from daskrl.driver.loop.policy_book import PolicyBook
    from daskrl.driver.loop.run_control import RunControl
    from daskrl.driver.loop.run_outputs import RunOutputs
    from daskrl.monitor.run_state import RunState
    from daskrl.runtime.actors.handles import ComponentHandle

logger = logging.getLogger(__name__)


class Run(Protocol):
    """What stopping uses of a live run (:class:`daskrl.driver.loop.live_run.Run`, which imports this module)."""

    fleet: Fleet | None
    control: RunControl
    observers: Sequence[Observer]
    state: RunState
    book: PolicyBook
    outputs: RunOutputs
    ledger: ComponentLedger
    phase: str  # "failed": a component failed, and no final checkpoint is taken

    def count_steps_and_episodes(self, s: dict) -> None: ...
    def report(self) -> None: ...
    def checkpoint(self) -> None: ...
    def warn(self, message: str) -> None: ...
    def data_path(self) -> dict[str, Any]: ...


def stop_in_order(run: Run) -> None:
    """See the module docstring. A run that stopped by a failure (its phase is not ``stopping``) writes no last row:
    its last good row and checkpoint stay the newest."""
    run.control.steering.close(run.control.reason)
    fleet = run.fleet
    if fleet is None:
        run.outputs.console.close()
        each_observer(run, "on_stop")
        return
    samplers = fleet.samplers.all() + fleet.relays.handles()
    try:
        problems = _stop_sampling_then_learning(run, fleet)
    finally:  # whatever stopped the sequence, the samplers' memory goes (an existing cluster's workers stay up)
        release_all(samplers)
    for problem in problems:
        run.warn(problem)
    say_data_path(run)


def _stop_sampling_then_learning(run: Run, fleet: Fleet) -> list[str]:
    """Samplers stopped (their memory kept), the last row, ``on_stop``, the final checkpoint, the learners stopped;
    the problems met on the way."""
    final = stop_stages(sampler_stages(fleet), release=False)
    stopped = [s for s in final if "error" not in s]
    run.ledger.keep(stopped)
    if run.phase == "stopping":
        count_last_steps(run, stopped)
        run.report()
    run.outputs.console.close()  # the live view ends on the last row; what follows prints below it
    each_observer(run, "on_stop")
    problems = [s["error"] for s in final if "error" in s]
    if fleet.learners() and run.phase != "failed":
        drain_replay(fleet, stopped)
        problems += final_checkpoint(run)
    consumers = stop_stages(consumer_stages(fleet))
    run.ledger.keep([s for s in consumers if "error" not in s])  # their last word: a replay shard's after the drain
    for s in consumers:
        run.outputs.take_news(s)  # the training steps since the last poll
    return problems + [s["error"] for s in consumers if "error" in s]


def sampler_stages(fleet: Fleet) -> list[list[ComponentHandle]]:
    """The samplers and relays in the order they stop: the rollout workers first (one may wait on an inference
    worker's reply or read parameters from a relay), then the inference workers, then the relays."""
    return [fleet.samplers.rollout, fleet.samplers.inference, fleet.relays.handles()]


def consumer_stages(fleet: Fleet) -> list[list[ComponentHandle]]:
    """The consumers in the order they stop: the learners with their group members (a stopping group leader ends its
    group, so no member waits on it), then the replay shards (a learner reads from them) and the sampling-only sink."""
    learners = fleet.learners()
    return [learners, [handle for handle in fleet.consumers() if handle not in learners]]


def stop_stages(stages: Sequence[Sequence[ComponentHandle]], release: bool = True) -> list[dict]:
    """Stop each stage's components all at once (:func:`~daskrl.runtime.actors.handles.stop_all`), one stage after the
    other; their final stats."""
    return [final for stage in stages for final in stop_all(stage, release=release)]


def stop_created(fleet: Fleet) -> None:
    """Stop what a fleet that failed to start had created, in the same order, with no checkpoint."""
    stop_stages(sampler_stages(fleet))
    stop_stages(consumer_stages(fleet))


def count_last_steps(run: Run, final: list[dict]) -> None:
    """The samplers' steps and episodes since the last poll: the learners trained on those steps and the replay
    shards store them, so the last row, the final checkpoint and the summary count them."""
    for s in final:
        if s.get("name"):
            run.count_steps_and_episodes(s)
            run.outputs.take_news(s)  # the slots they filled and the episodes they recorded since the last poll
    run.state.env_steps = run.state.env_steps_offset + run.state.tally.total


def each_observer(run: Run, hook: str, *args: Any) -> None:
    """Call ``hook`` on every observer while the run stops; one that raises is told about, and the others still get
    it (the run's first failure is what the user needs to read)."""
    for observer in run.observers:
        try:
            getattr(observer, hook)(run, *args)
        except Exception as exc:
            run.warn(f"{type(observer).__name__}.{hook} failed: {type(exc).__name__}: {exc}")
            logger.info("%s.%s failed", type(observer).__name__, hook, exc_info=exc)


def drain_replay(fleet: Fleet, stopped: Sequence[dict]) -> None:
    """Off-policy: each replay shard takes the slots its rollout workers filled before they stopped (the signals
    may still be on their way), so the final checkpoint's replay holds every step the run counts."""
    filled = {s["name"]: int(s["slots_filled"]) for s in stopped if "slots_filled" in s}
    for shard in fleet.replay.shards:
        feeding = set(fleet.replay.rollout_of(shard))
        mine = {worker: n for worker, n in filled.items() if worker in feeding}
        try:
            if mine and not shard.call("take_slots", mine, timeout=30):
                logger.info("replay shard %s did not take every last slot within 5 s", shard.name)
        except Exception as exc:  # a shard that died: the checkpoint says so (it saves without it)
            logger.info("replay shard %s did not answer at the stop: %s", shard.name, exc)


def final_checkpoint(run: Run) -> list[str]:
    """Every policy's checkpoint with the learners' last statistics; the problem, if it could not be written."""
    try:
        for policy, learner in enumerate(run.fleet.teams.leaders):
            run.book.note_learner(policy, learner.call("stats", timeout=30))
            run.ledger.keep([run.book.learners[policy]])
        run.state.learner = run.book.learners[0]
        run.checkpoint()
    except Exception as exc:
        return [f"final checkpoint skipped ({exc}); the previous checkpoint is intact"]
    each_observer(run, "on_checkpoint", run.state.env_steps)
    return []


def say_data_path(run: Run) -> None:
    """One line on how trajectories and parameters travelled (shared memory, host relays, comms)."""
    path = run.data_path()
    if path["slots_shm"] + path["slots_comms"] + path["params_shm_reads"] + path["params_comms_reads"]:
        relayed = f", {path['params_relay_reads']:,} from host relays' shared memory (the relays fetched " \
                  f"{path['params_relay_fetches']:,})" if path["params_relay_fetches"] else ""
        say(f"daskrl: data path: trajectory slots {path['slots_shm']:,} through shared memory, "
            f"{path['slots_comms']:,} over comms; parameter versions read {path['params_shm_reads']:,} from "
            f"shared memory{relayed}, {path['params_comms_reads']:,} over comms ({len(path['hosts'])} host(s))")
