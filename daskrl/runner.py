"""The runner: places and connects the components, drives a run, logs, checkpoints and stops it cleanly.

It lives in the driver process next to the ``Client``. ``train(config)`` is the whole product in one call:
validate the configuration and the env (before any process starts), open the cluster, create the learner and
the sampler, then report every ``report_interval`` seconds until a stop condition, Ctrl-C or a component
failure, writing a final checkpoint on the way out.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.envs import EnvSpaces, probe_env
from daskrl.errors import TrainingError
from daskrl.experiment import open_experiment
from daskrl.monitor.console import ConsoleView
from daskrl.monitor.csv_log import CsvLog
from daskrl.monitor.dashboard import dashboard_page
from daskrl.monitor.stats import EpisodeWindow, FrameRate, time_shares
from daskrl.placement import place, role_counts
from daskrl.runtime import ComponentError, connect_cluster, spawn
from daskrl.runtime.cluster import ClusterSession, tls_security
from daskrl.runtime.component import ComponentHandle

if TYPE_CHECKING:  # torch-heavy modules are imported while the cluster starts (see train())
    from daskrl.learning.checkpoints import CheckpointStore
    from daskrl.sampling.sampler import Sampler


@dataclass
class RunState:
    """What the runner knows about the run at each report."""

    started: float = field(default_factory=time.monotonic)
    env_steps: int = 0
    env_steps_offset: int = 0
    elapsed_offset: float = 0.0
    episodes: EpisodeWindow = field(default_factory=EpisodeWindow)
    fps: FrameRate = field(default_factory=FrameRate)
    learner: dict = field(default_factory=dict)
    shares: dict = field(default_factory=dict)
    best_return: float = -math.inf
    reached_return_at: float | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def row(self) -> dict[str, Any]:
        m = self.learner.get("metrics", {})
        return {
            "time_s": round(self.elapsed + self.elapsed_offset, 3),
            "env_steps": self.env_steps,
            "fps": round(self.fps.rate, 1),
            "episode_return_mean": self.episodes.mean_return,
            "episode_return_std": self.episodes.std_return,
            "episode_length_mean": self.episodes.mean_length,
            "episodes": self.episodes.total,
            "policy_version": self.learner.get("policy_version", 0),
            "policy_lag": m.get("version_diff", math.nan),
            "loss": m.get("loss", math.nan),
            "policy_loss": m.get("policy_loss", math.nan),
            "value_loss": m.get("value_loss", math.nan),
            "entropy": m.get("entropy", math.nan),
            "approx_kl": m.get("approx_kl", math.nan),
            "clip_fraction": m.get("clip_fraction", math.nan),
            "grad_norm": m.get("grad_norm", math.nan),
            "learning_rate": m.get("lr", math.nan),
            "valid_fraction": m.get("valid_fraction", math.nan),
        }


def default_experiment_name(env: str) -> str:
    return f"{env.replace('/', '_').replace(':', '_')}_{time.strftime('%Y%m%d_%H%M%S')}"


def workers_needed(config: Config) -> int:
    return sum(role_counts(config).values())


def train(config: Config, client=None, on_report: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Train (or, with ``sampling_only``, just sample) as configured; returns a summary of the run."""
    state = RunState()
    config.validate()
    if not config.run.experiment:
        config.run.experiment = default_experiment_name(config.env.env)
    spaces = probe_env(config.env.env, config.env.env_kwargs)  # a bad env fails here, before any process starts
    exp_dir = config.experiment_dir
    lock, note = open_experiment(exp_dir, config.run.resume, config.run.overwrite)  # before anything is written
    try:
        if note:
            _say(f"daskrl: {note}")
        return _train_locked(config, client, spaces, state, on_report)
    finally:
        lock.release()


def _train_locked(config: Config, client, spaces: EnvSpaces, state: RunState, on_report) -> dict[str, Any]:
    exp_dir = config.experiment_dir
    scheduler = client if client is not None else (config.run.scheduler or None)
    security = tls_security(config.run.tls_ca_file, config.run.tls_cert, config.run.tls_key)
    # The cluster starts in the background (its workers import torch in a forkserver) while this process
    # imports torch too: on 2 cores the two overlap instead of adding up.
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(connect_cluster, scheduler,
                               n_workers=config.run.n_dask_workers or workers_needed(config),
                               dashboard_address=config.run.dashboard_address or ":0", security=security)
        try:
            from daskrl.learning.checkpoints import CheckpointStore
            from daskrl.learning.learner import Learner  # noqa: F401  (imported now, used in _Run.start)
            from daskrl.sampling.sampler import Sampler  # noqa: F401

            store = CheckpointStore(os.path.join(exp_dir, "checkpoints"), keep=config.run.keep_checkpoints)
            resume_state = _prepare_experiment(config, store)
        except BaseException:
            _close_when_started(starting)
            raise
        session = starting.result()
    if resume_state is not None:
        state.env_steps_offset = int(resume_state.get("env_steps", 0))
        state.elapsed_offset = float(resume_state.get("elapsed_s", 0.0))
        state.best_return = float(resume_state.get("best_return", -math.inf))
    csv_log = CsvLog(os.path.join(exp_dir, "metrics.csv"), append=resume_state is not None)
    from daskrl.monitor.tensorboard_log import TensorBoardLog

    tb_log = TensorBoardLog(os.path.join(exp_dir, "tensorboard"))
    run = _Run(config, session, spaces, store, csv_log, tb_log, state, on_report)
    stop_signals = _StopOnSignals()
    try:
        run.start(resume_state)
        run.loop(stop_signals)
    finally:
        run.console.close()
        stop_signals.restore()
        try:
            run.shutdown()
        finally:
            csv_log.close()
            tb_log.close()
            session.close()
    return run.summary()


class _StopOnSignals:
    """Ctrl-C and SIGTERM ask the loop to stop (checkpoint, stop components, exit 0) instead of raising."""

    def __init__(self) -> None:
        self.requested = ""
        self._previous = {}
        if _in_main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:  # a second Ctrl-C: stop waiting politely
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _close_when_started(starting) -> None:
    try:
        starting.result().close()
    except Exception:
        pass


def _prepare_experiment(config: Config, store: CheckpointStore) -> dict | None:
    """The checkpoint to resume from, or None for a new experiment (whose config.json is written here);
    ``open_experiment`` has already refused the inconsistent cases."""
    if config.run.resume:
        return store.load("latest")
    with open(os.path.join(config.experiment_dir, "config.json"), "w") as f:
        f.write(config.to_json())
    return None


class _Run:
    def __init__(self, config: Config, session: ClusterSession, spaces: EnvSpaces, store: CheckpointStore,
                 csv_log: CsvLog, tb_log, state: RunState, on_report) -> None:
        self.config, self.session, self.spaces = config, session, spaces
        self.store, self.csv_log, self.tb_log = store, csv_log, tb_log
        self.state, self.on_report = state, on_report
        self.client = session.client
        self.learner = None
        self.sink = None
        self.sampler: Sampler | None = None
        self.stop_reason = ""
        self.last_checkpoint = time.monotonic()
        self.failed = False  # a component failed: no final checkpoint, the last good one stays the newest
        self.silent: set[str] = set()
        self.params_desc = None
        self.last_stats: dict[str, dict] = {}  # the newest stats of each component (counters, no episodes)
        from daskrl.recovery import Recovery

        self.recovery = Recovery(self)
        seconds = config.run.train_for_seconds  # counted from this run's start; rows' time_s includes resumed time
        self.console = ConsoleView(config.run.train_for_env_steps, seconds + state.elapsed_offset if seconds else 0.0)

    # ---- start ----

    def start(self, resume_state: dict | None) -> None:
        c, client = self.config, self.client
        workers = client.scheduler_info()["workers"]
        self.placement = placement = place(workers, c)
        link = dashboard_page(self.client)
        _say(f"daskrl: experiment {c.experiment_dir} | env {c.env.env} | {len(workers)} Dask workers"
             + (f" | dashboard {link}" if link else ""))
        run_id = self.session.run_id
        learner_host, rollout_hosts, inference_hosts = placement.learner, placement.rollout, placement.inference
        params_desc = None
        from daskrl.learning.learner import Learner
        from daskrl.sampling.sampler import Sampler
        from daskrl.sampling.sink import SamplingSink

        if c.run.sampling_only:
            self.sink = spawn(client, SamplingSink, "sink", worker=rollout_hosts[0], config={"run_id": run_id})
            consumer = self.sink.on_trajectory
        else:
            self.learner = spawn(client, Learner, "learner", worker=learner_host,
                                 config=self.learner_config(learner_host))
            if resume_state is not None:
                self.learner.call("load_state", resume_state, int(resume_state.get("env_steps", 0)))
            params_desc = self.learner.call("params_desc")
            consumer = self.learner.on_trajectory
        self.sampler = Sampler(client, c, self.spaces, run_id, rollout_hosts, inference_hosts, params_desc)
        self.sampler.create(consumer)
        if self.learner is not None:
            self.learner.call("attach_workers", self.sampler.buffers)
            self.learner.call("start")
        else:
            self.sink.call("start")
        self.sampler.start()
        self.params_desc = params_desc
        self.state.fps.add(self.state.env_steps_offset)

    def learner_config(self, learner_host: str) -> dict[str, Any]:
        c, p = self.config, self.placement
        return {
            "run_id": self.session.run_id, "spaces": self.spaces.to_dict(), "model": dataclasses.asdict(c.model),
            "learner": dataclasses.asdict(c.learner),
            "samples_per_batch": c.learner.batch_size * c.learner.num_batches_per_epoch,
            "total_env_steps": c.run.train_for_env_steps, "seed": c.run.seed,
            "remote_params": _spans_hosts(p.rollout + p.inference, learner_host)}

    def components(self) -> list[ComponentHandle]:
        return [h for h in [self.learner, self.sink] if h is not None] + \
            (self.sampler.components if self.sampler is not None else [])

    # ---- the loop ----

    def loop(self, stop_signals: _StopOnSignals) -> None:
        c = self.config
        next_report = time.monotonic() + c.run.report_interval
        while True:
            time.sleep(0.25)
            self.poll()
            now = time.monotonic()
            reason = self.stop_condition() or (f"{stop_signals.requested} received" if stop_signals.requested else "")
            if now >= next_report or reason:
                self.report()
                next_report = now + c.run.report_interval
            if self.learner is not None and now - self.last_checkpoint >= c.run.checkpoint_interval:
                try:
                    self.checkpoint()
                except ComponentError as exc:  # the learner died since the poll: the next poll recovers it
                    _say(f"daskrl: warning: checkpoint skipped ({exc}); the previous checkpoint is intact")
            if reason:
                self.stop_reason = reason
                _say(f"daskrl: stopping: {reason}")
                return

    def poll(self) -> None:
        state = self.state
        lost = self.recovery.lost_components()
        stats = []
        for handle in self.components():
            if (handle.name, handle.address) in lost:
                self.replace(handle, "its worker left the cluster")
                continue
            try:
                stats.append(handle.call("collect", timeout=10))
            except ComponentError as exc:
                self.replace(handle, str(exc))
        self._keep_stats(stats)
        if self.learner is not None:
            state.learner = next((s for s in stats if s.get("name") == self.learner.name), state.learner)
        for s in stats:
            if s.get("state") == "failed":
                self.failed = True
                errors = s.get("errors") or [{"message": f"component {s['name']!r} failed"}]
                raise TrainingError(errors[-1]["message"])
            for message in s.get("env_errors", []):
                _say(f"daskrl: warning: {message}")
            self.check_heartbeat(s)
        for s in stats:
            if s.get("cls") == "RolloutWorker":
                self.recovery.last_env_steps[s["name"]] = s.get("env_steps", 0)
        steps = sum(self.recovery.last_env_steps.values()) + self.recovery.lost_env_steps
        for s in stats:
            state.episodes.extend(s.get("episodes", []))
        state.env_steps = state.env_steps_offset + steps
        state.fps.add(state.env_steps)
        state.shares = time_shares(stats)
        target = self.config.run.stop_at_return
        if target is not None and state.reached_return_at is None and len(state.episodes.returns) >= 10 \
                and state.episodes.mean_return >= target:
            state.reached_return_at = state.elapsed

    def replace(self, handle: ComponentHandle, cause: str) -> None:
        """Recreate a lost component (see recovery.py); the run goes on."""
        self.recovery.recover(handle, cause)

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
        message = f"component {name!r} has been silent for {age:.0f} s; it is in: {where}"
        _say(f"daskrl: warning: {message}")
        try:
            self.client.log_event("daskrl-heartbeats", {"component": name, "age_s": age,
                                                        "stack": stats.get("stack", [])})
        except Exception:
            pass

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
        with open(os.path.join(self.config.experiment_dir, "time_breakdown.jsonl"), "a") as f:
            f.write(json.dumps({"time_s": row["time_s"], "env_steps": row["env_steps"],
                                "shares": self.state.shares}) + "\n")
        self.publish_metrics(row)
        self.console.update(row)
        if self.on_report is not None:
            self.on_report({**row, "shares": self.state.shares})

    def publish_metrics(self, row: dict) -> None:
        """Low-rate metrics (one event per report) for the dashboard page, through the scheduler's event log."""
        try:
            self.client.log_event(METRICS_TOPIC, {
                "run": self.config.run.experiment, "env": self.config.env.env, "row": _finite(row),
                "shares": self.state.shares, "stop_at": {
                    "env_steps": self.config.run.train_for_env_steps, "seconds": self.config.run.train_for_seconds}})
        except Exception:  # the dashboard is a view; a hiccup there must not stop training
            pass

    def checkpoint(self) -> None:
        state = self.state
        snapshot = self.learner.call("checkpoint_state", timeout=120)
        mean = state.episodes.mean_return
        best = not math.isnan(mean) and len(state.episodes.returns) >= 10 and mean > state.best_return
        if best:
            state.best_return = mean
        snapshot.update({"env_steps": state.env_steps, "elapsed_s": state.elapsed + state.elapsed_offset,
                         "best_return": state.best_return, "episode_return_mean": mean,
                         "config": self.config.to_json()})
        self.store.save(snapshot, state.env_steps, tag_best=best, score=mean if best else None)
        self.last_checkpoint = time.monotonic()

    # ---- stop ----

    def shutdown(self) -> None:
        """Stop sampling first (no new data), checkpoint the learner, then stop it. Errors are reported, not
        raised over each other: the first failure is what the user needs to read."""
        problems = []
        if self.sampler is not None:
            final = self.sampler.stop()
            self._keep_stats([s for s in final if "error" not in s])
            for s in final:
                if "error" in s:
                    problems.append(s["error"])
        if self.learner is not None and not self.failed:
            try:
                self.poll_learner_only()
                self.checkpoint()
            except Exception as exc:
                problems.append(f"final checkpoint skipped ({exc}); the previous checkpoint is intact")
            try:
                self.learner.call("stop", timeout=30)
            except ComponentError as exc:
                problems.append(str(exc))
        if self.sink is not None:
            try:
                self.sink.call("stop", timeout=30)
            except ComponentError as exc:
                problems.append(str(exc))
        for p in problems:
            _say(f"daskrl: warning: {p}")
        path = self.data_path()
        if path["slots_shm"] + path["slots_comms"] + path["params_shm_reads"] + path["params_comms_reads"]:
            _say(f"daskrl: data path: trajectory slots {path['slots_shm']:,} through shared memory, "
                 f"{path['slots_comms']:,} over comms; parameter versions read {path['params_shm_reads']:,} from "
                 f"shared memory, {path['params_comms_reads']:,} over comms ({len(path['hosts'])} host(s))")

    def poll_learner_only(self) -> None:
        self.state.learner = self.learner.call("stats", timeout=30)
        self._keep_stats([self.state.learner])

    def _keep_stats(self, stats: list[dict]) -> None:
        for s in stats:
            if s.get("name"):
                self.last_stats[s["name"]] = {k: v for k, v in s.items() if k not in ("episodes", "stack")}

    def data_path(self) -> dict[str, Any]:
        """How the data moved: trajectory slots the batcher copied from shared memory (same host) or fetched
        over Dask comms (other hosts), parameter versions readers took either way, per component and in total."""
        from daskrl.runtime.shm import host_of

        out: dict[str, Any] = {"slots_shm": 0, "slots_comms": 0, "params_shm_reads": 0, "params_comms_reads": 0,
                               "remote_params": False, "hosts": [], "components": {}}
        hosts = set()
        for name, s in sorted(self.last_stats.items()):
            counters, batcher = s.get("counters", {}), s.get("batcher", {})
            entry = {"cls": s.get("cls"), "address": s.get("address"), "host": host_of(s.get("address")),
                     "params_shm_reads": int(counters.get("params_shm_reads", 0)),
                     "params_comms_reads": int(counters.get("params_comms_reads", 0))}
            hosts.add(entry["host"])
            if batcher:
                entry.update(slots_shm=int(batcher.get("slots_shm", 0)), slots_comms=int(batcher.get("slots_comms", 0)))
                out["slots_shm"] += entry["slots_shm"]
                out["slots_comms"] += entry["slots_comms"]
            if s.get("cls") == "Learner":
                out["remote_params"] = bool(s.get("remote_params", False))
            out["params_shm_reads"] += entry["params_shm_reads"]
            out["params_comms_reads"] += entry["params_comms_reads"]
            out["components"][name] = entry
        out["hosts"] = sorted(hosts)
        return out

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
            "reached_return_at_s": state.reached_return_at,
            "stop_reason": self.stop_reason,
            "time_shares": state.shares,
            # what --inference-precision became on each sampler's host (rollout workers with remote inference have
            # no policy of their own and are left out)
            "inference_precision": {name: s["inference_precision"] for name, s in sorted(self.last_stats.items())
                                    if s.get("inference_precision")},
            "recoveries": list(self.recovery.recoveries),
            "data_path": self.data_path(),
        }


METRICS_TOPIC = "daskrl-metrics"


def _finite(row: dict) -> dict:
    """NaN is not JSON: metrics not measured yet travel as None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def _spans_hosts(hosts: list[str], learner_host: str | None) -> bool:
    from daskrl.runtime.shm import force_comms, host_of

    return force_comms() or any(host_of(h) != host_of(learner_host) for h in hosts)


def _say(line: str) -> None:
    print(line, flush=True, file=sys.stdout)


__all__ = ["TrainingError", "train", "workers_needed"]
