"""The runner: one run from the driver process, next to the ``Client``, from the first check to the summary.

The steps, in order: check the configuration and the env before any process starts (:mod:`.preflight`), lock the
experiment directory, route Dask's and daskrl's log lines to its ``daskrl.log``, open the cluster (in the background,
while this process imports torch), place the components, then hand over to a :class:`~daskrl.driver.run.Run`, which
starts them, loops until a stop condition, Ctrl-C or a failure, and stops them with a final checkpoint. Features
that watch the loop (evaluation, PBT, elastic growth, the user's own) come in as observers
(:mod:`.observers`): ``daskrl.train`` chooses them from the config.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.config.env_defaults import describe as describe_env_defaults
from daskrl.driver.elastic import adapt_range, adaptive_start, elastic_enabled
from daskrl.driver.experiment import open_experiment, run_log_path
from daskrl.driver.observers import Observer
from daskrl.driver.placement import Placement, place_checked, workers_needed
from daskrl.driver.preflight import preflight
from daskrl.driver.stop_signals import StopOnSignals
from daskrl.envs import EnvSpaces
from daskrl.monitor.console import say
from daskrl.monitor.dashboard import DashboardPlugin
from daskrl.monitor.run_state import RunState
from daskrl.runtime.cluster import ClusterSession, connect_cluster
from daskrl.runtime.existing_cluster import tls_security
from daskrl.runtime.logs import route_logs

if TYPE_CHECKING:  # torch-heavy: imported while the cluster starts (see _prepare)
    from daskrl.driver.fleet import LearnerStart
    from daskrl.driver.policies import PolicyBook

logger = logging.getLogger(__name__)


def run_training(config: Config, client: Any = None, observers: Sequence[Observer] = ()) -> dict[str, Any]:
    """Train (or, with ``sampling_only``, just sample) as configured, with these observers; returns the summary.

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
                return _train_locked(config, client, spaces, observers)
            except BaseException as exc:
                logger.error("the run stopped: %s", exc, exc_info=exc)
                raise
    finally:
        lock.release()


@dataclass
class _Prepared:
    """What the driver readied while the cluster started: each policy's books and where it starts from."""

    book: PolicyBook
    resume_state: list[dict] | None  # each policy's newest checkpoint (None: a new experiment)
    starts: list[LearnerStart]  # where each policy's learner starts (its checkpoint, --init-checkpoint, or afresh)


def _train_locked(config: Config, client: Any, spaces: EnvSpaces, observers: Sequence[Observer]) -> dict[str, Any]:
    session, prepared = _open_cluster(config, client, spaces)
    try:  # before anything is written: a refusal here leaves the experiment as if the run never started
        placement = place_checked(session.client, config, spaces, check_memory=not session.embedded)
    except BaseException:
        session.close()
        raise
    bounds = adapt_range(config)
    if bounds is not None and session.cluster is not None:
        session.cluster.adapt(minimum=bounds[0], maximum=bounds[1])
    if prepared.resume_state is None:  # a new experiment: its config, written once the cluster is there to run it
        with open(os.path.join(config.experiment_dir, "config.json"), "w") as f:
            f.write(config.to_json())
    return _drive(config, session, spaces, prepared, placement, observers)


def _open_cluster(config: Config, client: Any, spaces: EnvSpaces) -> tuple[ClusterSession, _Prepared]:
    """Start (or connect to) the cluster in the background while this process imports torch and the components and
    readies each policy's books: on 2 cores the two overlap instead of adding up."""
    scheduler = client if client is not None else (config.run.scheduler or None)
    if isinstance(scheduler, str):
        say(f"daskrl: connecting to the Dask scheduler at {scheduler} (--connect-timeout {config.run.connect_timeout:g} s)")
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(
            connect_cluster, scheduler, n_workers=config.run.n_dask_workers or workers_needed(config),
            dashboard_address=config.run.dashboard_address or ":0",
            security=tls_security(config.run.tls_ca_file, config.run.tls_cert, config.run.tls_key),
            processes=not config.run.serial, scheduler_plugins=(DashboardPlugin(),),
            timeout=config.run.connect_timeout, log_path=run_log_path(config.experiment_dir))
        try:
            prepared = _prepare(config, spaces)
        except BaseException:
            _close_when_started(starting)
            raise
        return starting.result(), prepared


def _prepare(config: Config, spaces: EnvSpaces) -> _Prepared:
    from daskrl.driver.fleet import LearnerStart  # torch and the components, imported now: used in start
    from daskrl.driver.policies import PolicyBook
    from daskrl.learning.checkpoints import initial_weights
    from daskrl.models.actor_critic import check_model

    check_model(config, spaces)  # a bad --encoder is refused here, not in a worker
    book = PolicyBook(config, resuming=config.run.resume)
    resume_state = book.resume_states()  # open_experiment checked they are there
    if resume_state is not None:
        starts = [LearnerStart.from_checkpoint(state) for state in resume_state]
    elif config.run.init_checkpoint:  # every policy from the same weights
        starts = [LearnerStart.from_weights(initial_weights(config.run.init_checkpoint))] * book.num_policies
    else:
        starts = [LearnerStart()] * book.num_policies
    return _Prepared(book, resume_state, starts)


def _drive(config: Config, session: ClusterSession, spaces: EnvSpaces, prepared: _Prepared, placement: Placement,
           observers: Sequence[Observer]) -> dict[str, Any]:
    """Start the run, loop until it stops, stop it (with a final checkpoint) and close what it opened."""
    from daskrl.driver.run import Run

    state = RunState()
    if prepared.resume_state is not None:  # every policy's checkpoint is of the same moment
        state.env_steps_offset = int(prepared.resume_state[0].get("env_steps", 0))
        state.elapsed_offset = float(prepared.resume_state[0].get("elapsed_s", 0.0))
    run = Run(config, session, spaces, prepared.book, state, observers, elastic=elastic_enabled(config))
    stop_signals = StopOnSignals()
    try:
        run.start(placement, prepared.starts)
        run.loop(stop_signals)
    finally:
        run.console.close()
        stop_signals.restore()
        try:
            run.shutdown()
        finally:
            run.close()
            session.close()
    return run.summary()


def _close_when_started(starting: Future) -> None:
    """Close a cluster whose start went on in the background while the run was refused."""
    try:
        starting.result().close()
    except Exception as exc:  # its start failed too: the first error is the one the user reads
        logger.info("the cluster started for a refused run did not close cleanly: %s", exc)
