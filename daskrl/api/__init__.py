"""The Python entry points: ``daskrl.start(config)`` (a handle on a live run), ``daskrl.train(config)`` (the same,
waited for), ``daskrl.attach(name, client)`` (a run started elsewhere on the same cluster).

A run's features that watch its loop are observers (:mod:`daskrl.driver.loop.observers`); :func:`feature_observers`
picks the ones the config asks for (evaluation and videos, PBT, elastic growth), and the user's come after them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.loop.observers import Observer, ReportCallback

Row = dict[str, Any]


def feature_observers(config: Config, given: Sequence[Observer] = ()) -> list[Observer]:
    """The observers the config asks for: evaluation and videos while training, --online-after's switch, a curriculum
    (unless one of the ``given`` observers is a curriculum with a rule of its own), a league, PBT, replay saved with the
    checkpoints (an elastic run's growth and retirements are its sizing's: daskrl/driver/changes/fleet_sizing.py)."""
    observers: list[Observer] = []
    r = config.run
    if not r.sampling_only and (r.eval_interval_env_steps or r.eval_interval_updates or r.save_video_every_env_steps):
        from daskrl.evaluation.evaluator import Evaluation  # torch: imported only by runs that evaluate

        observers.append(Evaluation())
    if config.algo.online_after and not r.sampling_only:
        from daskrl.driver.loop.online_switch import OnlineSwitch

        observers.append(OnlineSwitch())
    if config.env.curriculum or config.env.curriculum_tasks:
        from daskrl.curriculum.observer import CurriculumObserver

        if not any(isinstance(o, CurriculumObserver) for o in given):
            observers.append(CurriculumObserver())
    if config.policies.league:
        from daskrl.league.observer import LeagueObserver

        observers.append(LeagueObserver())
    if config.policies.pbt:
        from daskrl.pbt.driver import PBTDriver

        observers.append(PBTDriver())
    if config.algo.checkpoint_replay and algorithm_of(config).uses_replay and not r.sampling_only:
        from daskrl.driver.loop.replay_checkpoints import ReplayCheckpoints

        observers.append(ReplayCheckpoints())
    return observers


def _launch(config: Config, client: Any, observers: Sequence[Observer], on_report: Callable[[Row], None] | None,
            progress: bool = True):
    from daskrl.driver.launch.start import launch

    chosen = [*feature_observers(config, observers), *observers, *([ReportCallback(on_report)] if on_report else [])]
    return launch(config, client, chosen, progress)


def start(config: Config, client: Any = None, observers: Sequence[Observer] = (),
          on_report: Callable[[Row], None] | None = None) -> Any:
    """Start a run and return its :class:`~daskrl.api.handle.RunHandle` as soon as its components are placed and
    training has begun (a bad option, env or cluster is refused here, in one line); its loop trains on a thread
    of this process. ``client``: a ``distributed.Client`` of a cluster to run on (default: ``--scheduler``, else
    an embedded ``LocalCluster``); several runs may share one cluster, each on workers no other run holds.
    ``observers`` and ``on_report`` as for :func:`train`."""
    from daskrl.api.handle import RunHandle

    live = _launch(config, client, observers, on_report, progress=False)  # its handle shows it: no report lines
    live.start_thread()
    return RunHandle(live)


def train(config: Config, client: Any = None, observers: Sequence[Observer] = (),
          on_report: Callable[[Row], None] | None = None) -> dict[str, Any]:
    """Train (or, with ``config.run.sampling_only``, just sample) as configured; returns a summary of the run.

    What ``start(config).wait()`` does, with the loop on this thread, so that Ctrl-C (or SIGTERM) stops the run in
    order: a last row, a final checkpoint, exit 0 (a second Ctrl-C stops waiting politely). ``observers``:
    :class:`~daskrl.driver.loop.observers.Observer` objects that see the run's loop (start, every poll, every report,
    every checkpoint, stop) and add to the summary. ``on_report(row)``: a function called with every report's row
    (an observer of one hook)."""
    from daskrl.driver.launch.stop_signals import StopOnSignals

    live = _launch(config, client, observers, on_report)
    stop_signals = StopOnSignals()
    try:
        return live.run_loop(stop_signals)
    finally:
        stop_signals.restore()


def attach(name: str, client: Any, control: bool = False) -> Any:
    """A handle on run ``name``, started elsewhere on ``client``'s cluster (:class:`~daskrl.api.attached.
    AttachedRun`): its status and rows; with ``control``, also stop, set and scale."""
    from daskrl.api.attached import AttachedRun

    return AttachedRun(client, name, control)
