"""The Python entry points: ``daskrl.train(config)``.

A run's features that watch its loop are observers (:mod:`daskrl.driver.observers`); this module picks the ones the
config asks for (evaluation and videos, PBT, elastic growth), adds the user's, and hands them to the runner
(:mod:`daskrl.driver.runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.elastic import ElasticGrowth, elastic_enabled
from daskrl.driver.observers import Observer, ReportCallback


def feature_observers(config: Config) -> list[Observer]:
    """The observers the config asks for: elastic growth, evaluation and videos while training, PBT."""
    observers: list[Observer] = []
    if elastic_enabled(config):
        observers.append(ElasticGrowth())
    r = config.run
    if not r.sampling_only and (r.eval_interval_env_steps or r.save_video_every_env_steps):
        from daskrl.evaluation.evaluator import Evaluation  # torch: imported only by runs that evaluate

        observers.append(Evaluation())
    if config.policies.pbt:
        from daskrl.pbt.driver import PBTDriver

        observers.append(PBTDriver())
    return observers


def train(config: Config, client: Any = None, observers: Sequence[Observer] = (),
          on_report: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train (or, with ``config.run.sampling_only``, just sample) as configured; returns a summary of the run.

    ``client``: a ``distributed.Client`` of a cluster to run on (default: ``--scheduler``, else an embedded
    ``LocalCluster``). ``observers``: :class:`~daskrl.driver.observers.Observer` objects that see the run's loop
    (start, every poll, every report, every checkpoint, stop) and add to the summary. ``on_report(row)``: a
    function called with every report's row (an observer of one hook)."""
    from daskrl.driver.runner import run_training

    chosen = [*feature_observers(config), *observers, *([ReportCallback(on_report)] if on_report else [])]
    return run_training(config, client, chosen)
