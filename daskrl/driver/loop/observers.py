"""Observers: what sees a run's loop and acts on it, besides training itself.

The runner's loop turns four times a second: it collects every component's statistics, then hands the run to each
observer (``on_poll``); every ``--report-interval`` seconds it writes a row and hands that on (``on_report``); it
tells observers when a checkpoint was written and, once, when the run stops. Evaluation while training, PBT and
elastic growth are observers of this kind, and so is whatever a user passes to
``daskrl.train(config, observers=[...])``, as Sample Factory's ``AlgoObserver`` does::

    class PrintBest(daskrl.Observer):
        def __init__(self):
            self.best = float("-inf")

        def on_report(self, run, row):
            self.best = max(self.best, row["episode_return_mean"])

        def summary(self):
            return {"best_return_seen": self.best}

Every hook runs in the driver, on the loop's thread, between two polls, so a slow hook delays the run's reports
(hand long work to a thread of your own, as the evaluator does). A hook that raises while the run trains ends it:
its components stop, a final checkpoint is written, and ``train()`` raises that error; while the run stops
(``on_stop``, the final ``on_checkpoint``) an error is a warning. An observer that wants the run to end asks with
``run.request_stop(reason)``. ``run`` is the live run as :class:`Run` describes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from daskrl.config import Config
from daskrl.envs import EnvSpaces
from daskrl.monitor.run_state import RunState
from daskrl.runtime.actors.incidents import Incidents

if TYPE_CHECKING:  # the fleet and the books: imported where the run starts
    from daskrl.driver.fleet.fleet import Fleet
    from daskrl.driver.loop.policy_book import PolicyBook


class Run(Protocol):
    """What an observer sees of a live run (:class:`daskrl.driver.loop.live_run.Run`)."""

    config: Config
    spaces: EnvSpaces
    state: RunState  # env steps, elapsed seconds, recent episodes, shares of time: what the next row is made of
    fleet: Fleet  # its components, by role and policy
    book: PolicyBook  # each policy's episodes, learner statistics and checkpoints
    incidents: Incidents  # counted hiccups that did not stop the run

    def say(self, message: str) -> None:
        """A line on the console (and in the run's log)."""

    def warn(self, message: str) -> None:
        """A warning line on the console."""

    def log_event(self, topic: str, msg: dict) -> None:
        """A low-rate event for the dashboard (through the scheduler's event log)."""

    def request_stop(self, reason: str) -> None:
        """Stop in order at the next turn of the loop (a last row, a final checkpoint), as Ctrl-C does."""


class Observer:
    """A hook into a run's loop (see the module docstring); override the hooks you need."""

    def before_components(self, run: Run) -> None:
        """The run's fleet is made and its components are about to be created: set what they start with
        (``run.fleet.samplers.course``: a curriculum's task, a league's opponents)."""

    def on_start(self, run: Run) -> None:
        """The components are placed, wired and started; nothing was reported yet."""

    def on_poll(self, run: Run) -> None:
        """After each poll (four a second): ``run.state`` holds the components' newest statistics."""

    def on_report(self, run: Run, row: dict[str, Any]) -> None:
        """A report's row (the one ``metrics.csv`` got, with ``shares``: where each component's time went)."""

    def on_checkpoint(self, run: Run, env_steps: int) -> None:
        """Every policy's checkpoint at ``env_steps`` is on disk."""

    def on_stop(self, run: Run) -> None:
        """The run is stopping (its last row is written; sampling stopped, the learners still run): finish or abandon
        work."""

    def summary(self) -> dict[str, Any]:
        """What this observer adds to the summary ``train()`` returns."""
        return {}


class ReportCallback(Observer):
    """``train(config, on_report=fn)``: ``fn(row)`` at every report (the row with its ``shares``)."""

    def __init__(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self.fn = fn

    def on_report(self, run: Run, row: dict[str, Any]) -> None:
        self.fn(row)
