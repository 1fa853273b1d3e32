"""``--deterministic``: the driver reads the run once per training step, while nothing moves.

A ``--sync`` step takes every slot of every rollout worker, so while the learner holds a step's slots (it does with
``--deterministic``, :meth:`~daskrl.learning.learner.Learner.release_step`) every sampler waits with its steps and
episodes counted and announced. The driver's loop then polls every component, writes the row, checks the stop rules
and only then lets the learner hand the slots back. Rows, episode windows and the step at which the run stops are
the same in every run with the same flags and seed; a timed poll (the usual loop) would read each of them at
whatever point of a step the clock fell.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daskrl.errors import ComponentError

#: a step not held after this many seconds is read anyway, so a failed component is seen; such a reading falls
#: mid-step, and the run is then no longer repeatable from there (docs/reproducibility.md)
WAIT_S = 30.0
#: the longest one wait for the learner lasts, so a stop signal (Ctrl-C) is seen within it
ASK_S = 1.0


def lockstep_loop(run: Any, stop_signals: Any) -> None:
    """The live run's loop under ``--deterministic`` (``run``: :class:`~daskrl.driver.loop.live_run.Run`): one turn
    per training step. The step's row is written after its slots went back: it holds what the poll read, and
    sampling need not wait for the files; a stop at the step writes it as the last row."""
    lockstep = Lockstep(lambda: run.fleet.teams.leaders[0])
    while True:
        held = lockstep.wait(stop_signals)
        reason = run.read_run(stop_signals)
        if run.fleet.learners() and run.book.checkpoint_due():
            run.checkpoint_or_warn()
        if reason:
            run.stop_for(reason)
            return
        if held:
            lockstep.release()
            run.report()


class Lockstep:
    """Waits for the learner's held step (:meth:`wait`) and hands it back once the driver read it (:meth:`release`)."""

    def __init__(self, learner: Callable[[], Any]) -> None:
        """``learner()``: the handle of the run's one learner now (``--deterministic`` refuses a learner group; a
        recovered learner has a new handle)."""
        self.learner = learner

    def wait(self, stop_signals: Any = None) -> bool:
        """Whether the learner holds a step now (False: :data:`WAIT_S` passed, a stop signal came or the learner did
        not answer first: the loop's poll then finds what happened)."""
        give_up = time.monotonic() + WAIT_S
        while time.monotonic() < give_up and not getattr(stop_signals, "requested", ""):
            try:
                if self.learner().call("wait_held_step", ASK_S, timeout=ASK_S + 30) is not None:
                    return True
            except ComponentError:
                return False
        return False

    def release(self) -> None:
        """Let the learner hand the step's slots back: sampling goes on (a learner lost meanwhile is the next poll's
        to recover)."""
        try:
            self.learner().call("release_step")
        except ComponentError:
            pass
