"""The start of a run from the driver process, next to the ``Client``: from the first check to training begun.

The steps, in order: check the configuration and the env before any process starts (:mod:`.preflight`), lock the
experiment directory, route Dask's and daskrl's log lines to its ``daskrl.log``, open the cluster (in the background,
while this process imports the components' classes; the driver never imports torch: the model is checked on a
worker, checkpoints come serialized), place the components, then hand over to a
:class:`~daskrl.driver.loop.live_run.Run`, which starts them, loops until a stop condition, Ctrl-C or a failure, and
stops them with a final checkpoint. Features that watch the loop (evaluation, PBT, elastic growth, the user's own)
come in as observers (:mod:`daskrl.driver.loop.observers`): ``daskrl.train`` chooses them from the config.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.config.algo_options import describe_algo_defaults
from daskrl.config.env_defaults import describe as describe_env_defaults
from daskrl.driver.changes.elastic import ElasticGrowth, adapt_range, adaptive_start, elastic_enabled
from daskrl.driver.changes.fleet_sizing import ElasticSizing, FleetSizing
from daskrl.driver.changes.retirements import PlannedRetirements
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.placement import Placement, place_claimed, workers_needed
from daskrl.driver.launch.deployment import deploy_spec
from daskrl.driver.launch.experiment import open_experiment, run_log_path
from daskrl.driver.launch.model_check import check_model_on_cluster
from daskrl.driver.launch.preflight import preflight, task_profile
from daskrl.driver.launch.startup import StartupClock
from daskrl.driver.loop.observers import Observer
from daskrl.envs import EnvSpaces
from daskrl.errors import one_line
from daskrl.monitor.console import console_level, say, say_warning, warn
from daskrl.monitor.dashboard import DashboardPlugin
from daskrl.monitor.run_state import RunState
from daskrl.monitor.stats import EpisodeWindow
from daskrl.runtime import dask_internals
from daskrl.runtime.access.cluster import ClusterSession, connect_cluster
from daskrl.runtime.access.existing_cluster import tls_security
from daskrl.runtime.access.runs import RunClaim
from daskrl.runtime.actors.handles import looks_like_a_lost_worker
from daskrl.runtime.deploy import connect_deployment, prepare_deployment
from daskrl.runtime.logs import route_logs
from daskrl.runtime.workers import worker_server

if TYPE_CHECKING:  # imported while the cluster starts (see _prepare)
    from daskrl.driver.fleet.fleet import LearnerStart
    from daskrl.driver.loop.live_run import Run
    from daskrl.driver.loop.policy_book import PolicyBook
    from daskrl.monitor.outputs.wandb_log import WandbLog

logger = logging.getLogger(__name__)

#: seconds a fleet that lost a worker while it started waits for the cluster to have as many as before
RESTART_WAIT_S = 60.0


def launch(config: Config, client: Any = None, observers: Sequence[Observer] = (), progress: bool = True) -> LiveRun:
    """Everything up to training begun, in the caller's thread (so a refusal raises here): check, lock the
    experiment, route the logs, open the cluster, claim and place, start the components. Returns the
    :class:`LiveRun`, whose loop the caller runs (:meth:`LiveRun.run_loop`, or on a thread: ``start_thread``).
    ``progress``: each report on the console (off for a run whose handle shows its state).

    While it runs, Dask's and daskrl's log lines go to ``<experiment>/daskrl.log`` (with the traceback of whatever
    stopped the run), not to the terminal (``--log-level debug``: to both); ``--log-level`` says which of the run's
    own lines the terminal shows."""
    worker_server.refuse_a_run_while_a_worker_imports_the_script()  # before anything is locked or started
    clock = StartupClock()
    clock.mark("imports")
    spaces = preflight(config, client)
    clock.mark("checks")
    config = adaptive_start(config)
    lock, note = open_experiment(config.experiment_dir, config.run.resume, config.run.overwrite)  # before any write
    stack = ExitStack()
    stack.callback(lock.release)
    try:
        level = stack.enter_context(console_level(config.run.log_level))
        stack.enter_context(route_logs(run_log_path(config.experiment_dir), say_warning, level=min(level, logging.INFO),
                                       echo=level <= logging.DEBUG))
        dropped = (f"observation keys {', '.join(spaces.dropped_obs_keys)} have no fixed shape and are left "
                   "out (--obs-keys chooses the keys)") if spaces.dropped_obs_keys else ""
        family = describe_env_defaults(config, task_profile(config))
        for line in (note, family, describe_algo_defaults(config), dropped):
            if line:
                say(f"daskrl: {line}")
        sizing = sizing_for(config)  # fixed or elastic, chosen once: its observers watch the cluster first
        run = _start(config, client, spaces, [*sizing.observers(), *observers], stack, progress, clock, sizing)
        return LiveRun(run, stack)
    except BaseException as exc:
        logger.error("the run stopped before it trained: %s", exc, exc_info=exc)
        stack.close()
        raise


@dataclass
class _Prepared:
    """What the driver readied while the cluster started: each policy's books and where it starts from."""

    book: PolicyBook
    resume_state: list[dict] | None  # each policy's newest checkpoint (None: a new experiment)
    starts: list[LearnerStart]  # where each policy's learner starts (its checkpoint, --init-checkpoint, or afresh)


def sizing_for(config: Config) -> FleetSizing:
    """The run's sizing, chosen once (see :mod:`daskrl.driver.changes.fleet_sizing`): elastic where
    :func:`~daskrl.driver.changes.elastic.elastic_enabled` says so, with the observers that follow the cluster."""
    if not elastic_enabled(config):
        return FleetSizing()
    growth = ElasticGrowth()
    return ElasticSizing([growth, PlannedRetirements(growth)])


def _start(config: Config, client: Any, spaces: EnvSpaces, observers: Sequence[Observer], stack: ExitStack,
           progress: bool, clock: StartupClock, sizing: FleetSizing) -> Run:
    """Open the cluster, claim and place, and start the run's components (what the run opened goes on ``stack``),
    each phase's end on ``clock``; ``sizing``: fixed or elastic."""
    from daskrl.driver.loop.live_run import Run  # imported while the cluster started (see _open_cluster)

    session, prepared = _open_cluster(config, client, spaces, sizing)
    clock.mark("cluster")
    stack.callback(session.close)
    claim = RunClaim(session.client, config.run.experiment)
    claim.open(config.experiment_dir, config.run.share_workers)  # a live run of that name is refused here
    stack.callback(_end_claim, claim)
    # before anything is written: a refusal here leaves the experiment as if the run never started
    # (``started``: ``config`` with fewer rollout workers where an elastic run starts on a small cluster)
    placement, started = place_claimed(session.client, config, spaces, claim, check_memory=not session.embedded,
                                       say=say, fit=sizing.fit)
    # a bad --encoder is refused here, before any component, on the learner's worker (which imports torch anyway;
    # samplers on the numpy path never do)
    check_model_on_cluster(session.client, config, spaces, placement.learners[:1])
    clock.mark("placement")
    bounds = adapt_range(config)
    adaptable = session.cluster or session.deployment  # never a cluster the user brought: that one is theirs
    if bounds is not None and adaptable is not None:
        adaptable.adapt(minimum=bounds[0], maximum=bounds[1])
    wandb_log = _open_wandb(started, prepared.resume_state is not None, stack)  # a refusal still writes nothing
    if prepared.resume_state is None:  # a new experiment: its config, written once the cluster is there to run it
        with open(os.path.join(config.experiment_dir, "config.json"), "w") as f:
            f.write(config.to_json())  # as asked: a resume on a larger cluster starts with all its rollout workers
    run = Run(started, session, spaces, prepared.book, _resumed_state(prepared), observers,
              sizing=sizing, claim=claim, progress=progress, wandb_log=wandb_log)
    stack.callback(run.close)

    def place_again() -> Placement:  # the same fleet as the run's config says (``started``), on the workers now
        _wait_for_workers(session.client, len(placement.names), RESTART_WAIT_S)
        return place_claimed(session.client, started, spaces, claim, check_memory=not session.embedded, say=say,
                             fit=FleetSizing().fit)[0]

    try:
        _start_fleet(run, placement, prepared.starts, place_again)
    except BaseException:
        run.shutdown()
        raise
    clock.mark("components")
    run.observers.append(FirstStepWatch(clock))
    clock.saw_version(run.state.learner.get("policy_version", 0))
    say(f"daskrl: {clock.line()}")
    return run


class FirstStepWatch(Observer):
    """Tells the start-up clock when the run's first training step ended (its policy version moved), and adds where
    start-up went to the run's summary."""

    def __init__(self, clock: StartupClock) -> None:
        self.clock = clock

    def on_poll(self, run: Any) -> None:
        learner = run.state.learner
        self.clock.saw_version(learner.get("policy_version", 0), learner.get("first_step_at"))

    def summary(self) -> dict[str, Any]:
        return {"startup": self.clock.summary()}


def _open_wandb(config: Config, resuming: bool, stack: ExitStack) -> WandbLog | None:
    """The run's W&B run when --wandb-project asks for one (ended by the run; by ``stack`` if the run never
    comes to be, as failed)."""
    if not config.run.wandb_project:
        return None
    from daskrl.monitor.outputs.wandb_log import WandbLog

    wandb_log = WandbLog.open(config, resuming, warn, quiet=config.run.log_level in ("warning", "error"))
    stack.callback(wandb_log.close, failed=True)  # a no-op once the run closed it
    return wandb_log


def _start_fleet(run: Run, placement: Placement, starts: list[LearnerStart],
                 place_again: Callable[[], Placement]) -> None:
    """Start the run's fleet. A worker lost while it starts (a process killed, a nanny restarting it: a running
    fleet recovers such a loss, a starting one has nothing to recover yet) gets the fleet one more start on the
    workers the cluster has then, said in one line; a second failure, or a failure with every worker still
    there (a bug, an env that raises), is the run's error."""
    try:
        run.start(placement, starts)
        return
    except Exception as exc:
        lost = lost_workers(run.client, placement, settle_s=LOSS_SETTLE_S if looks_like_a_lost_worker(exc) else 0.0)
        if not lost:
            raise
        run.say(f"daskrl: worker {', '.join(lost)} was lost while the fleet started ({one_line(exc)}); starting "
                "the fleet again, once, on the workers the cluster has now")
        run.abandon_fleet()
    run.start(place_again(), starts)


#: seconds the scheduler is given to learn of a worker's death after a start failed the way a lost worker fails it
LOSS_SETTLE_S = 5.0


def lost_workers(client: Any, placement: Placement, settle_s: float = LOSS_SETTLE_S) -> list[str]:
    """The names of ``placement``'s workers that left the cluster. The scheduler learns of a death from the
    worker's nanny or a closed comm, a moment after the caller may have: it is given ``settle_s`` to."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            present = set(dask_internals.cluster_workers(client))
        except Exception:  # the scheduler itself is unreachable: no worker's loss to retry around
            return []
        lost = [placement.names.get(a, a) for a in placement.addresses() if a not in present]
        if lost or time.monotonic() >= deadline:
            return lost
        time.sleep(0.25)


def _wait_for_workers(client: Any, count: int, timeout: float) -> None:
    """Until the cluster has ``count`` workers again (a nanny brings a killed one back in seconds), or ``timeout``
    passed (then placement takes what there is, or refuses in its one line)."""
    deadline = time.monotonic() + timeout
    while len(dask_internals.cluster_workers(client)) < count and time.monotonic() < deadline:
        time.sleep(0.25)


def _resumed_state(prepared: _Prepared) -> RunState:
    """What the run knows at its start: the env steps and seconds of the runs it resumes (every policy's checkpoint
    is of the same moment)."""
    config = prepared.book.config
    state = RunState(episodes=EpisodeWindow(config.run.stop_window), counts_updates=algorithm_of(config).offline)
    if prepared.resume_state is not None:
        state.env_steps_offset = int(prepared.resume_state[0].get("env_steps", 0))
        state.elapsed_offset = float(prepared.resume_state[0].get("elapsed_s", 0.0))
        if config.env.curriculum or config.env.curriculum_tasks:  # where the curriculum given again goes on from
            state.curriculum = prepared.resume_state[0].get("curriculum")
        if config.policies.league:  # its payoff table and ratings, kept in policy 0's checkpoints
            state.league = prepared.resume_state[0].get("league")
    return state


def _end_claim(claim: RunClaim) -> None:
    """The run's workers are free for the next run (a scheduler gone meanwhile frees them by itself)."""
    try:
        claim.close()
    except Exception as exc:
        logger.info("the run's claim could not be ended on the scheduler: %s", exc)


def _open_cluster(config: Config, client: Any, spaces: EnvSpaces, sizing: FleetSizing
                  ) -> tuple[ClusterSession, _Prepared]:
    """Start (or connect to) the cluster in the background while this process imports the components and
    readies each policy's books: on 2 cores the two overlap instead of adding up."""
    scheduler = client if client is not None else (config.run.scheduler or None)
    if isinstance(scheduler, str):
        say(f"daskrl: connecting to the Dask scheduler at {scheduler} (--connect-timeout {config.run.connect_timeout:g} s)")
    options = {"dashboard_address": config.run.dashboard_address or ":0",
               "security": tls_security(config.run.tls_ca_file, config.run.tls_cert, config.run.tls_key),
               "processes": not config.run.serial, "scheduler_plugins": (DashboardPlugin(),),
               "timeout": config.run.connect_timeout, "log_path": run_log_path(config.experiment_dir),
               "silence_logs": False if config.run.log_level == "debug" else logging.WARNING}
    with ThreadPoolExecutor(1) as pool:
        if client is None and config.deploy.deploy != "local":  # a cluster of its own: SLURM jobs, SSH hosts
            spec = deploy_spec(config, sizing)
            prepare_deployment(spec.kind)
            say(f"daskrl: --deploy {spec.kind}: starting {spec.workers} worker processes (the run starts with "
                f"{spec.start_with})")
            starting = pool.submit(connect_deployment, spec, say, scheduler_plugins=(DashboardPlugin(),))
        else:
            starting = pool.submit(connect_cluster, scheduler,
                                   n_workers=config.run.n_dask_workers or workers_needed(config), **options)
        try:
            prepared = _prepare(config, spaces)
        except BaseException:
            _close_when_started(starting)
            raise
        return starting.result(), prepared


def _prepare(config: Config, spaces: EnvSpaces) -> _Prepared:
    from daskrl.driver.fleet.fleet import LearnerStart  # the components' classes, imported now: used in start
    from daskrl.driver.loop.policy_book import PolicyBook
    from daskrl.learning.checkpoints import initial_weights
    book = PolicyBook(config, resuming=config.run.resume)
    resume_state = book.resume_states()  # open_experiment checked they are there
    if book.resumed_from is not None:
        say(resumed_line(book.resumed_from, book.num_policies))
    if resume_state is not None:
        starts = [LearnerStart.from_checkpoint(state) for state in resume_state]
    elif config.run.init_checkpoint:  # every policy from the same weights
        starts = [LearnerStart.from_weights(initial_weights(config.run.init_checkpoint, config.run.sampling_only))
                  ] * book.num_policies
    else:
        starts = [LearnerStart()] * book.num_policies
    return _Prepared(book, resume_state, starts)


def resumed_line(resumed: dict[str, Any], num_policies: int) -> str:
    """What a resume loaded, in one line (so a user, or a drill, sees it is the newest complete checkpoint)."""
    partial = resumed["partial_writes_removed"]
    every = f" (each of the {num_policies} policies' of that moment)" if num_policies > 1 else ""
    left = f"; removed {partial} partial write(s) a killed run left" if partial else ""
    return f"daskrl: resuming from {resumed['checkpoint']}{every}: {resumed['env_steps']:,} env steps{left}"


def _close_when_started(starting: Future) -> None:
    """Close a cluster whose start went on in the background while the run was refused."""
    try:
        starting.result().close()
    except Exception as exc:  # its start failed too: the first error is the one the user reads
        logger.info("the cluster started for a refused run did not close cleanly: %s", exc)


class LiveRun:
    """A started run and its loop: run in this thread (:meth:`run_loop`) or on one of its own (``start_thread``);
    either way the loop's end stops the components (a final checkpoint) and closes what the run opened."""

    def __init__(self, run: Run, stack: ExitStack) -> None:
        self.run, self.stack = run, stack
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None

    def start_thread(self) -> None:
        """Run the loop on a thread of its own; what stops it is kept (``error``) for whoever waits for it."""
        self.thread = threading.Thread(target=self._loop_kept, name=f"daskrl-run-{self.run.config.run.experiment}",
                                       daemon=True)
        self.thread.start()

    def _loop_kept(self) -> None:
        try:
            self.run_loop()
        except BaseException:  # noqa: S110  (kept in self.error and raised by RunHandle.wait: no traceback here)
            pass

    def run_loop(self, stop_signals: Any = None) -> dict[str, Any]:
        """Loop until the run stops, stop it in order, close it; returns the summary (raises what stopped it)."""
        try:
            try:
                self.run.loop(stop_signals)
            finally:
                self.run.shutdown()
            self.summary = self.run.summary()
            return self.summary
        except BaseException as exc:
            self.error = exc
            logger.error("the run stopped: %s", exc, exc_info=exc)
            raise
        finally:
            self.stack.close()
            self.finished.set()
