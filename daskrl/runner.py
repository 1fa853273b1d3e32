"""The runner: drives a run from the driver process, next to the ``Client``.

``train(config)`` is the whole product in one call: validate the configuration and the env (before any process
starts), lock the experiment, open the cluster, have the fleet create and wire the components, then report every
``report_interval`` seconds until a stop condition, Ctrl-C or a component failure, recovering lost components on
the way (:mod:`daskrl.recovery`) and writing a final checkpoint on the way out.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.elastic import adapt_range, adaptive_start
from daskrl.env_defaults import describe as describe_env_defaults
from daskrl.envs import EnvSpaces
from daskrl.errors import ComponentError, TrainingError
from daskrl.experiment import open_experiment, run_log_path
from daskrl.monitor.console import ConsoleView, say
from daskrl.monitor.csv_log import CsvLog
from daskrl.monitor.dashboard import DashboardPlugin, dashboard_page
from daskrl.monitor.run_state import RunState, data_path, merge_incidents, messages_dropped
from daskrl.monitor.stats import time_shares
from daskrl.placement import Placement, Role, place_checked, workers_needed
from daskrl.preflight import preflight
from daskrl.protocol import HEARTBEATS_TOPIC, METRICS_TOPIC
from daskrl.runtime.cluster import ClusterSession, connect_cluster
from daskrl.runtime.existing_cluster import tls_security
from daskrl.runtime.handles import ComponentHandle
from daskrl.runtime.incidents import Incidents
from daskrl.runtime.logs import route_logs
from daskrl.runtime.stop_signals import StopOnSignals

if TYPE_CHECKING:  # torch-heavy: imported while the cluster starts (see _train_locked)
    from daskrl.elastic import Elastic
    from daskrl.evaluator import Evaluator
    from daskrl.fleet import Fleet
    from daskrl.monitor.tensorboard_log import TensorBoardLog
    from daskrl.pbt_driver import PBTDriver
    from daskrl.policies import PolicyBook
    from daskrl.recovery import Recovery

logger = logging.getLogger(__name__)


def train(config: Config, client=None, on_report: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Train (or, with ``sampling_only``, just sample) as configured; returns a summary of the run.

    While it runs, Dask's and daskrl's log lines go to ``<experiment>/daskrl.log`` (with the traceback of whatever
    stopped the run), not to the terminal."""
    spaces = preflight(config, client)
    config = adaptive_start(config)
    lock, note = open_experiment(config.experiment_dir, config.run.resume, config.run.overwrite)  # before any write
    try:
        with route_logs(run_log_path(config.experiment_dir), say):
            dropped = (f"observation keys {', '.join(spaces.dropped_obs_keys)} have no fixed shape and are left "
                       "out (--obs-keys chooses the keys)") if spaces.dropped_obs_keys else ""
            for line in (note, describe_env_defaults(config), dropped):
                if line:
                    say(f"daskrl: {line}")
            try:
                return _train_locked(config, client, spaces, on_report)
            except BaseException as exc:
                logger.error("the run stopped: %s", exc, exc_info=exc)
                raise
    finally:
        lock.release()


def _train_locked(config: Config, client, spaces: EnvSpaces, on_report) -> dict[str, Any]:
    exp_dir = config.experiment_dir
    scheduler = client if client is not None else (config.run.scheduler or None)
    security = tls_security(config.run.tls_ca_file, config.run.tls_cert, config.run.tls_key)
    if isinstance(scheduler, str):
        say(f"daskrl: connecting to the Dask scheduler at {scheduler} (--connect-timeout {config.run.connect_timeout:g} s)")
    # The cluster starts in the background (its workers import torch in a forkserver) while this process
    # imports torch too: on 2 cores the two overlap instead of adding up.
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(connect_cluster, scheduler,
                               n_workers=config.run.n_dask_workers or workers_needed(config),
                               dashboard_address=config.run.dashboard_address or ":0", security=security,
                               processes=not config.run.serial, scheduler_plugins=(DashboardPlugin(),),
                               timeout=config.run.connect_timeout, log_path=run_log_path(exp_dir))
        try:
            from daskrl.fleet import Fleet  # noqa: F401  (torch and the components, imported now: used in start)
            from daskrl.learning.checkpoints import initial_weights
            from daskrl.models.actor_critic import check_model
            from daskrl.monitor.tensorboard_log import TensorBoardLog
            from daskrl.policies import PolicyBook

            check_model(config, spaces)  # a bad --encoder is refused here, not in a worker
            book = PolicyBook(config, resuming=config.run.resume)
            resume_state = book.resume_states()  # open_experiment checked they are there
            init_weights = initial_weights(config.run.init_checkpoint) if resume_state is None \
                and config.run.init_checkpoint else None
        except BaseException:
            _close_when_started(starting)
            raise
        session = starting.result()
    try:  # before anything is written: a refusal here leaves the experiment as if the run never started
        placement = place_checked(session.client, config, spaces, check_memory=not session.embedded)
    except BaseException:
        session.close()
        raise
    if adapt_range(config) is not None and session.cluster is not None:
        session.cluster.adapt(minimum=adapt_range(config)[0], maximum=adapt_range(config)[1])
    if resume_state is None:  # a new experiment: its config, written once the cluster is there to run it
        with open(os.path.join(exp_dir, "config.json"), "w") as f:
            f.write(config.to_json())
    state = RunState()
    if resume_state is not None:
        first = resume_state[0] if isinstance(resume_state, list) else resume_state  # every policy's: same moment
        state.env_steps_offset = int(first.get("env_steps", 0))
        state.elapsed_offset = float(first.get("elapsed_s", 0.0))
    csv_log = CsvLog(os.path.join(exp_dir, "metrics.csv"), append=resume_state is not None)
    tb_log = TensorBoardLog(os.path.join(exp_dir, "tensorboard"))
    run = _Run(config, session, spaces, book, csv_log, tb_log, state, on_report)
    stop_signals = StopOnSignals()
    try:
        run.start(placement, resume_state, init_weights)
        run.loop(stop_signals)
    finally:
        run.console.close()
        stop_signals.restore()
        try:
            run.shutdown()
        finally:
            csv_log.close()
            book.close()
            tb_log.close()
            session.close()
    return run.summary()


def _close_when_started(starting) -> None:
    """Close a cluster whose start went on in the background while the run was refused."""
    try:
        starting.result().close()
    except Exception as exc:  # its start failed too: the first error is the one the user reads
        logger.info("the cluster started for a refused run did not close cleanly: %s", exc)


class _Run:
    def __init__(self, config: Config, session: ClusterSession, spaces: EnvSpaces, book: PolicyBook,
                 csv_log: CsvLog, tb_log: TensorBoardLog, state: RunState, on_report) -> None:
        self.config, self.session, self.spaces = config, session, spaces
        self.book, self.csv_log, self.tb_log = book, csv_log, tb_log
        self.state, self.on_report = state, on_report
        self.client = session.client
        self.fleet: Fleet | None = None
        self.recovery: Recovery | None = None
        self.elastic: Elastic | None = None
        self.incidents = Incidents(logger, "runner")
        self.stop_reason = ""
        self.last_checkpoint = time.monotonic()
        self.last_milestone = 0  # multiples of --keep-checkpoint-every-env-steps passed so far
        self.failed = False  # a component failed: no final checkpoint, the last good one stays the newest
        self.evaluator: Evaluator | None = None  # evaluation episodes and videos (daskrl/evaluator.py)
        self.pbt: PBTDriver | None = None  # --pbt (daskrl/pbt_driver.py)
        self.silent: set[str] = set()
        self.last_stats: dict[str, dict] = {}  # the newest stats of each component (counters, no episodes)
        seconds = config.run.train_for_seconds  # counted from this run's start; rows' time_s includes resumed time
        self.console = ConsoleView(config.run.train_for_env_steps, seconds + state.elapsed_offset if seconds else 0.0)

    # ---- start ----

    def start(self, placement: Placement, resume_state: dict | None, init_weights: dict | None) -> None:
        from daskrl.elastic import Elastic, elastic_enabled
        from daskrl.evaluator import Evaluator
        from daskrl.fleet import Fleet  # imported (with torch) while the cluster started: see _train_locked
        from daskrl.recovery import Recovery

        c = self.config
        link = dashboard_page(self.client)
        say(f"daskrl: experiment {c.experiment_dir} | env {c.env.env} | {len(placement.names)} Dask workers"
            + (" (in this process: --serial)" if c.run.serial else "") + (f" | dashboard {link}" if link else ""))
        self.fleet = Fleet(self.session, c, self.spaces, placement, warn=lambda m: say(f"daskrl: warning: {m}"))
        elastic = elastic_enabled(c)
        self.recovery = Recovery(self.fleet, self.book.stores, c.run.max_learner_restarts, self.incidents,
                                 shrink_when_full=elastic, rollout_wait_s=10.0 if elastic else 15.0)
        self.fleet.create(resume_state, init_weights)
        self.elastic = Elastic(self.fleet, c, elastic, say, self.incidents)
        self.evaluator = Evaluator.for_run(c, self.spaces, self.state, self.incidents,
                                           lambda m: say(f"daskrl: warning: {m}"))
        if c.policies.pbt:
            from daskrl.pbt_driver import PBTDriver

            self.pbt = PBTDriver(self.fleet, c, self.book, self.state.env_steps_offset, resume_state is not None, say,
                                 self._log_event)
        learners = self.fleet.learner_devices()
        if len(learners) > 1 or any(device != "cpu" for device in learners.values()):
            say("daskrl: " + ", ".join(f"{name} trains on {device}" for name, device in learners.items())
                + (f" (a data-parallel group of {len(learners)})" if self.fleet.learner_members else ""))
        self.state.fps.add(self.state.env_steps_offset)
        every = c.run.keep_checkpoint_every_env_steps
        self.last_milestone = self.state.env_steps_offset // every if every else 0

    # ---- the loop ----

    def loop(self, stop_signals: StopOnSignals) -> None:
        c = self.config
        next_report = time.monotonic() + c.run.report_interval
        while True:
            time.sleep(0.25)
            self.poll()
            if self.evaluator is not None:
                self.evaluator.poll(self.state, self.fleet.learner)
            if self.pbt is not None:
                self.pbt.poll(self.state.env_steps, self.state.elapsed + self.state.elapsed_offset)
            now = time.monotonic()
            reason = self.stop_condition() or (f"{stop_signals.requested} received" if stop_signals.requested else "")
            if now >= next_report or reason:
                self.report()
                next_report = now + c.run.report_interval
            if self.fleet.learner is not None and now - self.last_checkpoint >= c.run.checkpoint_interval:
                try:
                    self.checkpoint()
                except ComponentError as exc:  # the learner died since the poll: the next poll recovers it
                    say(f"daskrl: warning: checkpoint skipped ({exc}); the previous checkpoint is intact")
            if reason:
                self.stop_reason = reason
                say(f"daskrl: stopping: {reason}")
                return

    def poll(self) -> None:
        state, fleet = self.state, self.fleet
        for retired in self.elastic.poll():  # drained with a worker that left in order: its last word counts
            self._retire(retired["handle"], retired.get("stats") or {})
        lost = self.recovery.lost_components()
        stats = []
        for handle in fleet.components():
            if self.elastic.is_leaving(handle) and fleet.role_of(handle.name) is Role.ROLLOUT:
                if (handle.name, handle.address) in lost:  # gone before its retirement report reached us
                    self._retire(handle, {})
                continue  # draining: its report (or, after the grace, its loss) comes next
            if (handle.name, handle.address) in lost:
                self.replace(handle, "its worker left the cluster")
                continue
            try:
                stats.append(handle.call("collect", timeout=10))
            except ComponentError as exc:
                if not (fleet.role_of(handle.name) is Role.ROLLOUT and self.elastic.closing(handle)):
                    self.replace(handle, str(exc))
        self._keep_stats(stats)
        if fleet.learner is not None:
            state.learner = next((s for s in stats if s.get("name") == fleet.learner.name), state.learner)
            for s in stats:
                if fleet.role_of(s.get("name", "")) is Role.LEARNER:
                    self.book.note_learner(fleet.policy_of(s["name"]), s)
        for s in stats:
            if s.get("state") == "failed":
                self.failed = True
                errors = s.get("errors") or [{"message": f"component {s['name']!r} failed"}]
                raise TrainingError(errors[-1]["message"])
            for message in s.get("env_errors", []):
                say(f"daskrl: warning: {message}")
            self.check_heartbeat(s)
            if fleet.role_of(s["name"]) is not None and "env_steps" in s:
                state.tally.update(s["name"], s["env_steps"])
            state.episodes.extend(self.book.trained(s.get("episodes", [])))
            self.book.add_episodes(s.get("episodes", []))
            state.add_extras(s.get("episode_extras", []))
        state.env_steps = state.env_steps_offset + state.tally.total
        state.fps.add(state.env_steps)
        state.shares = time_shares(stats)
        self.elastic.grow(state.shares)
        state.incidents = merge_incidents(self.incidents.snapshot(), list(self.last_stats.values()))
        state.messages_dropped = messages_dropped(list(self.last_stats.values()))
        target = self.config.run.stop_at_return
        if target is not None and state.reached_return_at is None and len(state.episodes.returns) >= 10 \
                and state.episodes.mean_return >= target:
            state.reached_return_at = state.elapsed

    def replace(self, handle: ComponentHandle, cause: str) -> None:
        """Recreate a lost component (see recovery.py); the run goes on. A lost rollout worker's step counter
        died with it: the steps it reported stay counted."""
        if self.fleet.role_of(handle.name) is Role.ROLLOUT:
            self.state.tally.lose(handle.name)
        self.last_stats.pop(handle.name, None)
        self.recovery.recover(handle, cause, self.state.env_steps)

    def _retire(self, handle: ComponentHandle, final: dict) -> None:
        """A rollout worker left with its worker, in order: count its last steps and episodes, then go on without
        it (an elastic run) or recreate it elsewhere (a fixed fleet)."""
        if final.get("env_steps") is not None:
            self.state.tally.update(handle.name, final["env_steps"])
        self.state.episodes.extend(self.book.trained(final.get("episodes", [])))
        self._keep_stats([final] if final.get("name") else [])
        self.state.tally.lose(handle.name)
        if self.elastic.enabled:
            self.fleet.forget(handle)
        else:
            self.recovery.recover(handle, "its worker left the cluster (drained)", self.state.env_steps)

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
        say(f"daskrl: warning: component {name!r} has been silent for {age:.0f} s; it is in: {where}")
        self._log_event(HEARTBEATS_TOPIC, {"component": name, "age_s": age, "stack": stats.get("stack", [])})

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

    def report(self) -> None:
        row = self.state.row()
        self.csv_log.write(row)
        self.tb_log.write(row, self.state.shares)
        policy_rows = self.book.rows(row["time_s"], row["env_steps"])
        self.book.write(policy_rows, self.tb_log)
        self.book.self_play_report(row["time_s"], row["env_steps"], self.tb_log)
        with open(os.path.join(self.config.experiment_dir, "time_breakdown.jsonl"), "a") as f:
            f.write(json.dumps({"time_s": row["time_s"], "env_steps": row["env_steps"],
                                "shares": self.state.shares}) + "\n")
        self._log_event(METRICS_TOPIC, {
            "run": self.config.run.experiment, "env": self.config.env.env, "row": _finite(row),
            "policies": [_finite(r) for r in policy_rows],
            "shares": self.state.shares, "incidents": self.state.incidents,
            "stop_at": {"env_steps": self.config.run.train_for_env_steps, "seconds": self.config.run.train_for_seconds}})
        self.console.update(row)
        if self.on_report is not None:
            self.on_report({**row, "shares": self.state.shares})

    def _log_event(self, topic: str, msg: dict) -> None:
        """Low-rate events for the dashboard (through the scheduler's event log): a view, so a hiccup there is
        counted and logged, and training goes on."""
        try:
            self.client.log_event(topic, msg)
        except Exception as exc:
            self.incidents.note(f"event-not-sent:{topic}", exc)

    def checkpoint(self) -> None:
        """Every policy's learner state, taken one after the other and written together (see PolicyBook)."""
        state = self.state
        snapshots = [h.call("checkpoint_state", timeout=120) for h in self.fleet.policy_learners]
        every = self.config.run.keep_checkpoint_every_env_steps
        milestone = bool(every) and state.env_steps // every > self.last_milestone
        for policy, snapshot in enumerate(snapshots):
            self.book.save(policy, snapshot, state, milestone)
        if milestone:
            self.last_milestone = state.env_steps // every
        self.last_checkpoint = time.monotonic()

    # ---- stop ----

    def shutdown(self) -> None:
        """Stop sampling first (no new data), checkpoint the learner, then stop it. Errors are reported, not
        raised over each other: the first failure is what the user needs to read."""
        fleet, problems = self.fleet, []
        if self.evaluator is not None:
            self.evaluator.close()
        if self.pbt is not None:
            self.pbt.close()
        if fleet is None:
            return
        final = fleet.stop(fleet.samplers())
        self._keep_stats([s for s in final if "error" not in s])
        problems += [s["error"] for s in final if "error" in s]
        if fleet.learner is not None and not self.failed:
            try:
                for policy, learner in enumerate(fleet.policy_learners):
                    self.book.note_learner(policy, learner.call("stats", timeout=30))
                    self._keep_stats([self.book.learners[policy]])
                self.state.learner = self.book.learners[0]
                self.checkpoint()
            except Exception as exc:
                problems.append(f"final checkpoint skipped ({exc}); the previous checkpoint is intact")
        consumers = fleet.stop(fleet.learners() + ([fleet.sink] if fleet.sink is not None else []))
        problems += [s["error"] for s in consumers if "error" in s]
        for p in problems:
            say(f"daskrl: warning: {p}")
        path = self.data_path()
        if path["slots_shm"] + path["slots_comms"] + path["params_shm_reads"] + path["params_comms_reads"]:
            say(f"daskrl: data path: trajectory slots {path['slots_shm']:,} through shared memory, "
                f"{path['slots_comms']:,} over comms; parameter versions read {path['params_shm_reads']:,} from "
                f"shared memory, {path['params_comms_reads']:,} over comms ({len(path['hosts'])} host(s))")

    def _keep_stats(self, stats: list[dict]) -> None:
        for s in stats:
            if s.get("name"):
                self.last_stats[s["name"]] = {k: v for k, v in s.items() if k not in ("episodes", "stack")}

    def data_path(self) -> dict[str, Any]:
        learner = self.fleet.learner.name if self.fleet is not None and self.fleet.learner is not None else None
        return data_path(self.last_stats, learner)

    def summary(self) -> dict[str, Any]:
        state = self.state
        return {
            "experiment_dir": self.config.experiment_dir,
            "env_steps": state.env_steps,
            "elapsed_s": state.elapsed,
            "fps": state.fps.rate,
            "mean_fps": (state.env_steps - state.env_steps_offset) / max(state.elapsed, 1e-9),
            "episode_return_mean": state.episodes.mean_return,
            "episodes": state.episodes.total,
            "policy_version": state.learner.get("policy_version", 0),
            "max_policy_lag": state.learner.get("max_policy_lag_seen"),  # the oldest sample trained on, in versions
            "train_step_ms": state.learner.get("metrics", {}).get("train_step_ms"),
            "reached_return_at_s": state.reached_return_at,
            "stop_reason": self.stop_reason,
            "time_shares": state.shares,
            # what --inference-precision became on each sampler's host (rollout workers with remote inference have
            # no policy of their own and are left out)
            "inference_precision": {name: s["inference_precision"] for name, s in sorted(self.last_stats.items())
                                    if s.get("inference_precision")},
            # each learner's worker, device and group (rank, generation, digests of its weights after recent steps)
            "learners": {name: {"address": s.get("address"), "device": s.get("device"), **s["group"]}
                         for name, s in sorted(self.last_stats.items()) if "group" in s},
            "recoveries": list(self.recovery.recoveries) if self.recovery is not None else [],
            "elastic": list(self.elastic.history) if self.elastic is not None else [],
            "incidents": dict(state.incidents),
            "data_path": self.data_path(),
            **({"policies": self.book.summary()} if self.book.num_policies > 1 else {}),
            **({"pbt": list(self.pbt.exploits)} if self.pbt is not None else {}),
        }


def _finite(row: dict) -> dict:
    """NaN is not JSON: metrics not measured yet travel as None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


__all__ = ["TrainingError", "train"]
