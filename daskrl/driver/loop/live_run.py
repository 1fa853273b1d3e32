"""A live run, as the driver holds it: its fleet, what it knows (``state``), its loop, its reports and checkpoints.

The loop polls every component four times a second (their statistics, and whether they are still there), recovers
what was lost (:mod:`daskrl.driver.changes.recovery`), retires what left in order
(:mod:`daskrl.driver.changes.departures`), then hands the run to its observers (:mod:`.observers`: evaluation, PBT,
elastic growth, the user's). Every ``report_interval`` seconds it
writes a row (CSV, TensorBoard, the dashboard's event, the console); every ``checkpoint_interval`` seconds each
policy's checkpoint. It stops at a stop condition, a stop request (Ctrl-C) or a component failure, and
:meth:`Run.shutdown` stops it in order (:mod:`.stopping`).
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.driver.changes.departures import Departures
from daskrl.driver.changes.recovery import Recovery
from daskrl.driver.fleet.fleet import Fleet, LearnerStart
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.fleet.policies import PolicyBook
from daskrl.driver.launch.startup import StartupClock
from daskrl.driver.loop.observers import Observer
from daskrl.driver.loop.poll_pace import PollPace
from daskrl.driver.loop.steering import Steering, apply_remote
from daskrl.driver.loop.stopping import stop_created, stop_in_order
from daskrl.driver.loop.summary import run_summary
from daskrl.envs import EnvSpaces
from daskrl.errors import ComponentError, TrainingError
from daskrl.monitor.console import ConsoleView, say, shows, warn
from daskrl.monitor.dashboard import dashboard_page
from daskrl.monitor.outputs.csv_log import CsvLog
from daskrl.monitor.outputs.tensorboard_log import TensorBoardLog
from daskrl.monitor.replay_stats import replay_shards
from daskrl.monitor.run_state import RunState, data_path, merge_incidents, messages_dropped
from daskrl.monitor.stats import time_shares
from daskrl.protocol import HEARTBEATS_TOPIC, METRICS_TOPIC
from daskrl.runtime.access.cluster import ClusterSession
from daskrl.runtime.access.runs import RunClaim
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.actors.incidents import Incidents
from daskrl.sampling.episode import episodes_from_event

if TYPE_CHECKING:  # W&B is imported only by the runs that log to it
    from daskrl.driver.changes.fleet_sizing import FleetSizing
    from daskrl.monitor.outputs.wandb_log import WandbLog

logger = logging.getLogger(__name__)

#: seconds between two signs of life to the cluster's run registry (its lease is far longer)
BEAT_S = 5.0


class Run:
    """See the module docstring. ``start``, then ``loop`` until it returns, then ``shutdown`` and ``summary``."""

    def __init__(self, config: Config, session: ClusterSession, spaces: EnvSpaces, book: PolicyBook,
                 state: RunState, observers: Sequence[Observer], sizing: FleetSizing, claim: RunClaim,
                 progress: bool = True, wandb_log: WandbLog | None = None) -> None:
        """``sizing``: fixed, or elastic (the fleet follows the cluster: a lost rollout worker with no idle worker
        left is not recreated, a drained one not replaced; :mod:`daskrl.driver.changes.fleet_sizing`); ``claim``:
        the run's record on the cluster (its workers); ``progress``: show each report on the console (a run started
        from Python, whose handle shows its state, keeps them out of a notebook's cells); ``wandb_log``: the run's
        W&B run (--wandb-project), which gets what TensorBoard gets and is ended with the run."""
        self.config, self.session, self.spaces, self.book, self.state = config, session, spaces, book, state
        self.observers, self.sizing, self.claim = list(observers), sizing, claim
        self.steering = Steering()  # what a run handle asks of the loop (new hyperparameters, scaling)
        self.pace = PollPace(config.run)  # how long the loop waits before each poll
        self.phase = "starting"  # starting, running, stopping, finished, failed
        self.rows: list[dict[str, Any]] = []  # every report's row, for the run's handle
        self.events_csv: CsvLog | None = None  # events.csv, from the first change made from outside
        self.next_beat = 0.0
        self.client = session.client
        exp_dir = config.experiment_dir
        self.csv_log = CsvLog(os.path.join(exp_dir, "metrics.csv"), append=config.run.resume)
        self.wandb_log = wandb_log
        self.tb_log = TensorBoardLog(os.path.join(exp_dir, "tensorboard"), mirror=wandb_log)
        self.fleet: Fleet | None = None
        self.recovery: Recovery | None = None
        self.departures: Departures | None = None
        self.incidents = Incidents(logger, "runner")
        self.startup: StartupClock | None = None  # where start-up went (set by the runner once the fleet started)
        self.stop_reason = ""
        self.stop_requested = ""  # why the run was asked to stop in order (request_stop)
        self.last_checkpoint = time.monotonic()
        self.last_milestone = 0  # multiples of --keep-checkpoint-every-env-steps passed so far
        self.failed = False  # a component failed: no final checkpoint, the last good one stays the newest
        self.silent: set[str] = set()
        self.last_stats: dict[str, dict] = {}  # the newest stats of each component (counters, no episodes)
        #: the last stats of components replaced under the same name (a learner moved or restarted, a rollout worker
        #: recreated): what they moved still counts in the data path's totals
        self.ended_stats: list[dict] = []
        seconds = config.run.train_for_seconds  # counted from this run's start; rows' time_s includes resumed time
        shown = progress and shows(logging.INFO)  # --log-level warning keeps the progress lines off the console too
        self.console = ConsoleView(config.run.train_for_env_steps, seconds + state.elapsed_offset if seconds else 0.0,
                                   None if shown else io.StringIO(), window=config.run.stop_window)

    def say(self, message: str) -> None:
        """A line on the console (and in the run's log)."""
        say(message)

    def warn(self, message: str) -> None:
        """A warning line on the console."""
        warn(message)

    def request_stop(self, reason: str) -> None:
        """Stop in order at the next turn of the loop (a last row, a final checkpoint), as Ctrl-C does; ``reason``
        is what the console and the summary's ``stop_reason`` say. Any thread may call it."""
        self.stop_requested = self.stop_requested or reason

    # ---- start ----

    def start(self, placement: Placement, starts: Sequence[LearnerStart]) -> None:
        """Create the fleet (each policy's learner starting as ``starts`` says), then tell the observers."""
        c = self.config
        link = dashboard_page(self.client)
        say(f"daskrl: experiment {c.experiment_dir} | env {c.env.env} | {len(placement.names)} Dask workers"
            + (" (in this process: --serial)" if c.run.serial else "") + (f" | dashboard {link}" if link else ""))
        self.fleet = Fleet(self.session, c, self.spaces, placement, warn=self.warn)
        self.recovery = Recovery(self.fleet, self.book.stores, c.run.max_learner_restarts, self.incidents,
                                 shrink_when_full=self.sizing.shrink_when_full,
                                 rollout_wait_s=self.sizing.rollout_wait_s,
                                 claim=self.claim, share=c.run.share_workers)
        self.departures = Departures(self.fleet, say, self.incidents)
        self.fleet.create(starts)
        self._say_devices()
        self.state.fps.add(self.state.env_steps_offset)
        every = c.run.keep_checkpoint_every_env_steps
        self.last_milestone = self.state.env_steps_offset // every if every else 0
        for observer in self.observers:
            observer.on_start(self)
        self.phase = "running"

    def abandon_fleet(self) -> None:
        """Stop what a fleet that failed to start had created, with no checkpoint: nothing trained yet."""
        fleet, self.fleet = self.fleet, None
        if fleet is not None:
            stop_created(fleet)

    def _say_devices(self) -> None:
        learners = self.fleet.learner_devices()
        if len(learners) > 1 or any(device != "cpu" for device in learners.values()):
            say("daskrl: " + ", ".join(f"{name} trains on {device}" for name, device in learners.items())
                + (f" (a data-parallel group of {len(learners)})" if self.fleet.learner_members else ""))

    # ---- the loop ----

    def loop(self, stop_signals: Any = None) -> None:
        """Poll, report and checkpoint until a stop condition or a stop request (``stop_signals.requested``: Ctrl-C
        or SIGTERM; or :meth:`request_stop`)."""
        next_report = time.monotonic() + self.config.run.report_interval
        while True:
            time.sleep(self.pace.next_wait(self.state))
            self.poll()
            self.steering.run_pending(self)
            now = time.monotonic()
            self._beat(now)
            signalled = getattr(stop_signals, "requested", "")
            reason = self.stop_condition() or self.stop_requested or (f"{signalled} received" if signalled else "")
            if now >= next_report and not reason:  # the last row is written at the stop, after the last steps
                self.report()
                # counted from the row, not from ``now``: a slow beat above delays this row, and the next one must
                # still come a whole interval after it (a row 0.6 s late was followed by one 0.74 s later)
                next_report = time.monotonic() + self.config.run.report_interval
            if self.fleet.learners() and now - self.last_checkpoint >= self.config.run.checkpoint_interval:
                self._checkpoint_or_warn()
            if reason:
                self.stop_reason = reason
                self.phase = "stopping"
                say(f"daskrl: stopping: {reason}")
                return

    def _beat(self, now: float) -> None:
        """Tell the cluster's run registry the run is alive, with its newest numbers and each policy's parameter
        block (a policy server following the run reads them), every few seconds; take the requests attached handles
        sent through it."""
        if now < self.next_beat:
            return
        self.next_beat = now + BEAT_S
        last = self.rows[-1] if self.rows else {}
        report = {k: _finite(last).get(k) for k in ("time_s", "env_steps", "fps", "episode_return_mean")}
        try:
            for command in self.claim.beat(self.phase, report, self.fleet.policy_params):
                apply_remote(self, command)
        except Exception as exc:  # the scheduler did not answer this time: the next beat tells it
            self.incidents.note("run-beat-not-sent", exc)

    def _checkpoint_or_warn(self) -> None:
        try:
            self.checkpoint()
        except ComponentError as exc:  # the learner died since the poll: the next poll recovers it
            self.warn(f"checkpoint skipped ({exc}); the previous checkpoint is intact")
            return
        for observer in self.observers:
            observer.on_checkpoint(self, self.state.env_steps)

    def poll(self) -> None:
        """One turn of the loop: retirements, every component's statistics (recovering the lost ones), the run's
        state from them, then the observers."""
        for retired in self.departures.poll():  # drained with a worker that left in order: its last word counts
            self._retire(retired["handle"], retired.get("stats") or {})
        stats = self._collect()
        self.keep_stats(stats)
        for s in stats:
            self._take(s)
        self._update_state(stats)
        for observer in self.observers:
            observer.on_poll(self)

    def _collect(self) -> list[dict]:
        """Every component's statistics; a component that is gone is recovered (or, leaving in order, retired)."""
        lost = self.recovery.lost_components()
        stats = []
        for handle in self.fleet.components():
            gone = (handle.bus_name, handle.address) in lost
            rollout = self.fleet.role_of(handle.name) is Role.ROLLOUT
            if rollout and self.departures.is_leaving(handle):
                if gone:  # gone before its retirement report reached us
                    self._retire(handle, {})
                continue  # draining: its report (or, after the grace, its loss) comes next
            if gone:
                self.replace(handle, "its worker left the cluster")
                continue
            try:
                stats.append(handle.call("collect", timeout=10))
            except ComponentError as exc:
                if not (rollout and self.departures.closing(handle)):
                    self.replace(handle, str(exc))
        return stats

    def _take(self, s: dict) -> None:
        """One component's statistics into the run's state: failures, env errors, silence, steps and episodes."""
        if s.get("state") == "failed":
            self.failed = True
            errors = s.get("errors") or [{"message": f"component {s['name']!r} failed"}]
            raise TrainingError(errors[-1]["message"])
        for message in s.get("env_errors", []):
            self.warn(message)
        self.check_heartbeat(s)
        if self.fleet.role_of(s["name"]) is Role.LEARNER:
            self.book.note_learner(self.fleet.policy_of(s["name"]), s)
        self.count_steps_and_episodes(s)

    def count_steps_and_episodes(self, s: dict) -> None:
        """A component's steps (a sampler's running total) and the episodes it finished since its last report."""
        if self.fleet.role_of(s["name"]) is not None and "env_steps" in s:
            self.state.tally.update(s["name"], s["env_steps"])
        trained = self.book.trained(episodes_from_event(s.get("episodes", [])))  # not a snapshot's side of a game
        self.state.episodes.extend(trained)
        self.book.add_episodes(trained)
        self.state.add_extras(s.get("episode_extras", []))

    def _update_state(self, stats: list[dict]) -> None:
        state = self.state
        state.learner = self.book.learners[0] or state.learner
        if self.startup is not None:
            self.startup.saw_version(state.learner.get("policy_version", 0), state.learner.get("first_step_at"))
        state.env_steps = state.env_steps_offset + state.tally.total
        state.fps.add(state.env_steps)
        state.shares = time_shares(stats)
        state.incidents = merge_incidents(self.incidents.snapshot(), list(self.last_stats.values()))
        state.messages_dropped = messages_dropped(list(self.last_stats.values()))
        state.replay = replay_shards(self.last_stats)
        target = self.config.run.stop_at_return
        if target is not None and state.reached_return_at is None and state.episodes.full \
                and state.episodes.mean_return >= target:
            state.reached_return_at = state.elapsed

    def replace(self, handle: ComponentHandle, cause: str) -> None:
        """Recreate a lost component (see recovery.py); the run goes on. A lost rollout worker's step counter
        died with it: the steps it reported stay counted."""
        if self.fleet.role_of(handle.name) is Role.ROLLOUT:
            self.state.tally.lose(handle.name)
        self._end_stats(handle.name)
        self.recovery.recover(handle, cause, self.state.env_steps)

    def account_retired(self, handle: ComponentHandle, final: dict) -> None:
        """A rollout worker that left in order: count its last steps and episodes."""
        if final.get("env_steps") is not None:
            self.state.tally.update(handle.name, final["env_steps"])
        trained = self.book.trained(final.get("episodes", []))
        self.state.episodes.extend(trained)
        self.book.add_episodes(trained)
        self.keep_stats([final] if final.get("name") else [])
        self.state.tally.lose(handle.name)

    def _retire(self, handle: ComponentHandle, final: dict) -> None:
        """A rollout worker left with its worker, in order: count its last steps and episodes, then go on as the
        run's sizing says (without it, elastic; recreated elsewhere, fixed)."""
        self.account_retired(handle, final)
        self.sizing.after_departure(handle, self.recovery, self.fleet, self.state.env_steps)

    def check_heartbeat(self, stats: dict) -> None:
        """Name a component whose loop has not turned for --heartbeat-timeout seconds, with what it is doing."""
        age, name = stats.get("heartbeat_age_s", 0.0), stats.get("name")
        if age <= self.config.run.heartbeat_timeout:
            self.silent.discard(name)
            return
        if name in self.silent:
            return
        self.silent.add(name)
        where = " <- ".join(line.strip() for line in reversed(stats.get("stack", [])[-3:])) or "unknown"
        self.warn(f"component {name!r} has been silent for {age:.0f} s; it is in: {where}")
        self.log_event(HEARTBEATS_TOPIC, {"component": name, "age_s": age, "stack": stats.get("stack", [])})

    def stop_condition(self) -> str:
        r, state = self.config.run, self.state
        if r.train_for_env_steps and state.env_steps >= r.train_for_env_steps:
            return f"reached {state.env_steps:,} env steps (--train-for-env-steps {r.train_for_env_steps:,})"
        if r.train_for_seconds and state.elapsed >= r.train_for_seconds:
            return f"trained for {state.elapsed:.0f} s (--train-for-seconds {r.train_for_seconds:g})"
        if state.reached_return_at is not None:
            return (f"mean return {state.episodes.mean_return:.1f} over the last {len(state.episodes.returns)} "
                    f"episodes reached --stop-at-return {r.stop_at_return:g}")
        return ""

    # ---- reports and checkpoints ----

    def report(self) -> None:
        """Write a row (CSV, TensorBoard, time_breakdown.jsonl, the dashboard's event, the console), each policy's
        rows, and hand the row to the observers."""
        row = self.state.row()
        self.rows.append(row)
        self.csv_log.write(row)
        self.tb_log.write(row, self.state.shares)
        policy_rows = self.book.rows(row["time_s"], row["env_steps"])
        self.book.write(policy_rows, self.tb_log)
        self.book.self_play_report(row["time_s"], row["env_steps"], self.tb_log)
        self.tb_log.flush()
        with open(os.path.join(self.config.experiment_dir, "time_breakdown.jsonl"), "a") as f:
            f.write(json.dumps({"time_s": row["time_s"], "env_steps": row["env_steps"],
                                "shares": self.state.shares}) + "\n")
        self.log_event(METRICS_TOPIC, {
            "run": self.config.run.experiment, "env": self.config.env.env, "row": _finite(row),
            "policies": [_finite(r) for r in policy_rows],
            "shares": self.state.shares, "incidents": self.state.incidents, "replay": self.state.replay,
            "stop_at": {"env_steps": self.config.run.train_for_env_steps, "seconds": self.config.run.train_for_seconds}})
        self.console.update(row)
        for observer in self.observers:
            observer.on_report(self, {**row, "shares": self.state.shares})

    def log_event(self, topic: str, msg: dict) -> None:
        """Low-rate events for the dashboard (through the scheduler's event log): a view, so a hiccup there is
        counted and logged, and training goes on."""
        try:
            self.client.log_event(topic, msg)
        except Exception as exc:
            self.incidents.note(f"event-not-sent:{topic}", exc)

    def checkpoint(self) -> list[bytes]:
        """Every policy's learner state, taken one after the other and written together (see PolicyBook); returns
        them, serialized (by policy)."""
        state = self.state
        snapshots = [h.call("checkpoint_bytes", self.book.checkpoint_meta(policy, state), timeout=120)
                     for policy, h in enumerate(self.fleet.policy_learners)]  # serialized there: no torch here
        every = self.config.run.keep_checkpoint_every_env_steps
        milestone = bool(every) and state.env_steps // every > self.last_milestone
        for policy, snapshot in enumerate(snapshots):
            self.book.save(policy, snapshot, state, milestone)
        if milestone:
            self.last_milestone = state.env_steps // every
        self.last_checkpoint = time.monotonic()
        return snapshots

    # ---- stop ----

    def shutdown(self) -> None:
        """Stop the run in order (see :func:`~daskrl.driver.loop.stopping.stop_in_order`)."""
        stop_in_order(self)

    def close(self) -> None:
        """Close the run's logs (after :meth:`shutdown`)."""
        self.console.close()
        if self.events_csv is not None:
            self.events_csv.close()
        self.csv_log.close()
        self.book.close()
        self.tb_log.close()
        if self.wandb_log is not None:  # after the observers stopped: the video recorded at the stop is in it
            self.wandb_log.close(failed=self.failed or self.phase not in ("stopping", "finished"))

    def keep_stats(self, stats: list[dict]) -> None:
        """The newest stats of each component; those of one that now runs elsewhere under the same name (a learner
        that moved) end (:attr:`ended_stats`)."""
        for s in stats:
            if s.get("name"):
                kept = self.last_stats.get(s["name"])
                if kept is not None and kept.get("address") != s.get("address"):
                    self._end_stats(s["name"])
                self.last_stats[s["name"]] = {k: v for k, v in s.items() if k not in ("episodes", "stack")}

    def _end_stats(self, name: str) -> None:
        """Component ``name``'s current incarnation ended: its last stats go to :attr:`ended_stats`."""
        last = self.last_stats.pop(name, None)
        if last is not None:
            self.ended_stats.append(last)

    def data_path(self) -> dict[str, Any]:
        learners = self.fleet.policy_learners if self.fleet is not None else []
        return data_path(self.last_stats, learners[0].name if learners else None, self.ended_stats)

    def summary(self) -> dict[str, Any]:
        """What ``train()`` returns (see :func:`~daskrl.driver.loop.summary.run_summary`)."""
        return run_summary(self)


def _finite(row: dict) -> dict:
    """NaN is not JSON: metrics not measured yet travel as None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


__all__ = ["Observer", "Run"]
