"""A live run, as the driver holds it: its fleet, what it knows (``state``), its loop, its reports and checkpoints.

The loop polls every component four times a second (their statistics, and whether they are still there): the
fleet's care (:mod:`daskrl.driver.changes.fleet_care`) recovers what was lost and retires what left in order, the
ledger (:mod:`.component_ledger`) keeps what each component said, and the observers (:mod:`.observers`: evaluation,
PBT, elastic growth, the user's) get the run. Every ``report_interval`` seconds it writes a row (:mod:`.run_outputs`:
CSV, TensorBoard, the console; and the dashboard's event); every ``checkpoint_interval`` seconds each policy's
checkpoint. It stops at a stop rule, a stop request (:mod:`.run_control`: Ctrl-C, an observer, a handle) or a
component failure, and :meth:`Run.shutdown` stops it in order (:mod:`.stopping`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.driver.changes.fleet_care import FleetCare
from daskrl.driver.fleet.fleet import Fleet, LearnerStart
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.loop.component_ledger import ComponentLedger
from daskrl.driver.loop.observers import Observer
from daskrl.driver.loop.pacing.lockstep import lockstep_loop
from daskrl.driver.loop.pacing.poll_pace import timed_loop
from daskrl.driver.loop.policy_book import PolicyBook
from daskrl.driver.loop.run_control import RunControl
from daskrl.driver.loop.run_outputs import RunOutputs
from daskrl.driver.loop.stopping import stop_created, stop_in_order
from daskrl.driver.loop.summary import run_summary
from daskrl.envs import EnvSpaces
from daskrl.errors import ComponentError, TrainingError
from daskrl.monitor.console import say, warn
from daskrl.monitor.dashboard import dashboard_page
from daskrl.monitor.replay_stats import replay_shards
from daskrl.monitor.run_state import RunState, merge_incidents, messages_dropped
from daskrl.monitor.stats import time_shares
from daskrl.runtime.access.cluster import ClusterSession
from daskrl.runtime.access.runs import RunClaim
from daskrl.runtime.actors.incidents import Incidents
from daskrl.sampling.episode import episodes_from_event

if TYPE_CHECKING:  # W&B is imported only by the runs that log to it
    from daskrl.driver.changes.fleet_sizing import FleetSizing
    from daskrl.monitor.outputs.wandb_log import WandbLog


class Run:
    """See the module docstring. ``start``, then ``loop`` until it returns, then ``shutdown`` and ``summary``."""

    def __init__(self, config: Config, session: ClusterSession, spaces: EnvSpaces, book: PolicyBook,
                 state: RunState, observers: Sequence[Observer], sizing: FleetSizing, claim: RunClaim,
                 progress: bool = True, wandb_log: WandbLog | None = None) -> None:
        """``sizing``: fixed, or elastic (:mod:`daskrl.driver.changes.fleet_sizing`); ``claim``: the run's record on
        the cluster (its workers); ``progress`` and ``wandb_log``: see :class:`.run_outputs.RunOutputs`."""
        self.config, self.session, self.spaces, self.book, self.state = config, session, spaces, book, state
        self.observers = list(observers)
        self.phase = "starting"  # starting, running, stopping; failed: a component failed (no final checkpoint)
        self.control = RunControl(claim)
        self.ledger = ComponentLedger(config.run.heartbeat_timeout, self.warn, self.log_event)
        self.outputs = RunOutputs(config, state, progress, wandb_log, session.client, self.ledger.incidents)
        self.fleet: Fleet | None = None
        self.care = FleetCare(config, sizing, claim, self.ledger.incidents)  # recovery and departures

    @property
    def client(self) -> Any:
        return self.session.client

    @property
    def incidents(self) -> Incidents:
        """The run's own counted hiccups that did not stop it."""
        return self.ledger.incidents

    def say(self, message: str) -> None:
        """A line on the console (and in the run's log)."""
        say(message)

    def warn(self, message: str) -> None:
        """A warning line on the console."""
        warn(message)

    def request_stop(self, reason: str) -> None:
        """Stop in order at the next turn of the loop (a last row, a final checkpoint), as Ctrl-C does; ``reason``
        is what the console and the summary's ``stop_reason`` say. Any thread may call it."""
        self.control.request_stop(reason)

    # ---- start ----

    def start(self, placement: Placement, starts: Sequence[LearnerStart]) -> None:
        """Create the fleet (each policy's learner starting as ``starts`` says), then tell the observers."""
        c = self.config
        link = dashboard_page(self.client)
        say(f"daskrl: experiment {c.experiment_dir} | env {c.env.env} | {len(placement.names)} Dask workers"
            + (" (in this process: --serial)" if c.run.serial else "") + (f" | dashboard {link}" if link else ""))
        self.fleet = Fleet(self.session, c, self.spaces, placement, warn=self.warn,
                           env_steps_offset=self.state.env_steps_offset)
        for observer in self.observers:
            observer.before_components(self)
        self.care.start(self.fleet, self.book.stores)
        self.fleet.create(starts)
        self._say_devices()
        self.state.fps.add(self.state.env_steps_offset)
        self.book.start_checkpoint_clock(self.state.env_steps_offset)
        for observer in self.observers:
            observer.on_start(self)
        self.phase = "running"

    def abandon_fleet(self) -> None:
        """Stop what a fleet that failed to start had created, with no checkpoint: nothing trained yet."""
        fleet, self.fleet = self.fleet, None
        if fleet is not None:
            stop_created(fleet)

    def _say_devices(self) -> None:
        learners = self.fleet.teams.devices()
        if len(learners) > 1 or any(device != "cpu" for device in learners.values()):
            say("daskrl: " + ", ".join(f"{name} trains on {device}" for name, device in learners.items())
                + (f" (a data-parallel group of {len(learners)})" if self.fleet.teams.members else ""))

    # ---- the loop ----

    def loop(self, stop_signals: Any = None) -> None:
        """Poll, report and checkpoint until a stop rule or a stop request (``stop_signals.requested``: Ctrl-C
        or SIGTERM; or :meth:`request_stop`)."""
        paced = lockstep_loop if self.config.run.deterministic else timed_loop
        paced(self, stop_signals)

    def read_run(self, stop_signals: Any) -> str:
        """One poll and what follows it (steering, the registry's beat); why the run stops now ('' if it goes on)."""
        self.poll()
        self.control.steering.run_pending(self)
        self.control.beat(self, time.monotonic())
        return self.control.stop_reason(self.config, self.state, stop_signals)

    def stop_for(self, reason: str) -> None:
        """End the loop's turns for ``reason`` (stopping in order follows: :meth:`shutdown`)."""
        self.control.reason, self.phase = reason, "stopping"
        say(f"daskrl: stopping: {reason}")

    def checkpoint_or_warn(self) -> None:
        try:
            self.checkpoint()
        except ComponentError as exc:  # the learner died since the poll: the next poll recovers it
            self.warn(f"checkpoint skipped ({exc}); the previous checkpoint is intact")
            return
        for observer in self.observers:
            observer.on_checkpoint(self, self.state.env_steps)

    def poll(self) -> None:
        """One turn of the loop: every component's statistics (recovering the lost ones, retiring the ones that
        left in order), the run's state from them, then the observers."""
        stats = self.care.collect(self)
        self.ledger.keep(stats)
        for s in stats:
            self._take(s)
        self._update_state(stats)
        for observer in self.observers:
            observer.on_poll(self)

    def _take(self, s: dict) -> None:
        """One component's statistics into the run's state: failures, env errors, silence, steps and episodes."""
        if s.get("state") == "failed":
            self.phase = "failed"
            errors = s.get("errors") or [{"message": f"component {s['name']!r} failed"}]
            raise TrainingError(errors[-1]["message"])
        for message in s.get("env_errors", []):
            self.warn(message)
        self.ledger.check_heartbeat(s)
        if self.fleet.roster.role_of(s["name"]) is Role.LEARNER:
            self.book.note_learner(self.fleet.roster.policy_of(s["name"]), s)
        self.count_steps_and_episodes(s)
        self.outputs.take_news(s)

    def count_steps_and_episodes(self, s: dict) -> None:
        """A component's steps (a sampler's running total) and the episodes it finished since its last report."""
        if self.fleet.roster.role_of(s["name"]) is not None and "env_steps" in s:
            self.state.tally.update(s["name"], s["env_steps"])
        trained = self.book.trained(episodes_from_event(s.get("episodes", [])))  # not a snapshot's side of a game
        self.state.episodes.extend(trained)
        for reader in self.state.episode_readers:
            reader(trained)
        self.book.add_episodes(trained)
        self.state.add_extras(s.get("episode_extras", []))

    def _update_state(self, stats: list[dict]) -> None:
        state, last = self.state, list(self.ledger.last_stats.values())
        state.learner = self.book.learners[0] or state.learner
        state.env_steps = state.env_steps_offset + state.tally.total
        self.fleet.took(state.env_steps)
        state.fps.add(state.env_steps)
        state.shares = time_shares(stats)
        state.incidents = merge_incidents(self.incidents.snapshot(), last)
        state.messages_dropped = messages_dropped(last)
        state.replay = replay_shards(self.ledger.last_stats)
        state.recorded_episodes = self.outputs.dataset.episodes
        target = self.config.run.stop_at_return
        if target is not None and state.reached_return_at is None and state.episodes.full \
                and state.episodes.mean_return >= target:
            state.reached_return_at, state.reached_return_mean = state.elapsed, state.episodes.mean_return

    # ---- reports and checkpoints ----

    def report(self) -> None:
        """Write a row everywhere it goes (:class:`.run_outputs.RunOutputs`: files, console, dashboard) and hand
        it to the observers."""
        row = self.state.row()
        self.outputs.write(row, self.state, self.book)
        for observer in self.observers:
            observer.on_report(self, {**row, "shares": self.state.shares})

    def log_event(self, topic: str, msg: dict) -> None:
        """A low-rate event for the dashboard (see :meth:`.run_outputs.RunOutputs.log_event`)."""
        self.outputs.log_event(topic, msg)

    def checkpoint(self) -> list[bytes]:
        """Every policy's learner state, taken one after the other and written together (see PolicyBook); returns
        them, serialized (by policy)."""
        snapshots = [h.call("checkpoint_bytes", self.book.checkpoint_meta(policy, self.state), timeout=120)
                     for policy, h in enumerate(self.fleet.teams.leaders)]  # serialized there: no torch here
        self.book.save_all(snapshots, self.state)
        return snapshots

    # ---- stop ----

    def shutdown(self) -> None:
        """Stop the run in order (see :func:`~daskrl.driver.loop.stopping.stop_in_order`)."""
        stop_in_order(self)

    def close(self) -> None:
        """Close the run's logs (after :meth:`shutdown`)."""
        self.outputs.close(failed=self.phase not in ("stopping", "finished"))
        self.book.close()

    def data_path(self) -> dict[str, Any]:
        learners = self.fleet.teams.leaders if self.fleet is not None else []
        return self.ledger.data_path(learners[0].name if learners else None)

    def summary(self) -> dict[str, Any]:
        """What ``train()`` returns (see :func:`~daskrl.driver.loop.summary.run_summary`)."""
        return run_summary(self)


__all__ = ["Observer", "Run"]
