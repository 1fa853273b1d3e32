"""How long the driver's loop waits before its next poll of the components: :data:`POLL_S`, or :data:`NEAR_POLL_S`
while a stop condition may be met before the next regular poll.

Why: a run notices that it reached ``--stop-at-return``, ``--train-for-env-steps`` or ``--train-for-seconds`` only
when it polls. With a poll every 0.25 s, CartPole runs stopped at mean returns of 492-500 for a target of 475 (the
mean had passed it up to a quarter of a second before: 15,000 env steps) and a run of 600,000 steps stopped at
615,264. Polling every 0.05 s throughout would cost the samplers about 2% of the cores on two (each poll asks every
component for its statistics); polling that often only near a stop costs a few polls (docs/performance.md).

:func:`timed_loop` is the live run's loop at that pace (``--deterministic`` runs take :mod:`.lockstep`'s instead).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daskrl.config import RunConfig
    from daskrl.monitor.run_state import RunState

#: seconds between two polls of the components
POLL_S = 0.25
#: seconds between two polls while a stop condition is near
NEAR_POLL_S = 0.05
#: how much faster than over the last polls the mean return may rise before the next regular poll, and still be caught
RISE_MARGIN = 4.0


class PollPace:
    """The wait before each poll (:meth:`next_wait`, called once after each poll: it follows the mean return's rise)."""

    def __init__(self, run: RunConfig) -> None:
        self.run = run
        self.last_mean: tuple[float, float] | None = None  # (elapsed s, mean return) at the poll before

    def next_wait(self, state: RunState) -> float:
        return_near = self._return_near(state)  # first: it follows the mean at every poll
        return NEAR_POLL_S if return_near or self._steps_or_time_near(state) else POLL_S

    def _steps_or_time_near(self, state: RunState) -> bool:
        """The steps or seconds left would pass before the next regular poll, at the current pace."""
        r = self.run
        return bool(r.train_for_env_steps and r.train_for_env_steps - state.env_steps <= state.fps.rate * POLL_S
                    or r.train_for_seconds and r.train_for_seconds - state.elapsed <= POLL_S)

    def _return_near(self, state: RunState) -> bool:
        """The mean return would reach ``--stop-at-return`` before the next regular poll if it rose
        :data:`RISE_MARGIN` times as fast as since the poll before."""
        target, episodes = self.run.stop_at_return, state.episodes
        if target is None or not episodes.returns:
            return False
        now, mean = state.elapsed, episodes.mean_return
        last, self.last_mean = self.last_mean, (now, mean)
        if last is None or now <= last[0]:
            return mean >= target
        rate = max(mean - last[1], 0.0) / (now - last[0])
        return mean + RISE_MARGIN * rate * POLL_S >= target


def timed_loop(run: Any, stop_signals: Any) -> None:
    """The live run's loop (``run``: :class:`~daskrl.driver.loop.live_run.Run`): a poll at :class:`PollPace`'s pace,
    a row every ``--report-interval`` seconds, checkpoints when due, until a stop rule or request."""
    pace, interval = PollPace(run.config.run), run.config.run.report_interval
    next_report = time.monotonic() + interval
    while True:
        time.sleep(pace.next_wait(run.state))
        reason = run.read_run(stop_signals)
        if time.monotonic() >= next_report and not reason:  # the last row is written at the stop, after the last steps
            run.report()
            # counted from the row, not from the poll: a slow beat delays this row, and the next one must still
            # come a whole interval after it (a row 0.6 s late was followed by one 0.74 s later)
            next_report = time.monotonic() + interval
        if run.fleet.learners() and run.book.checkpoint_due():
            run.checkpoint_or_warn()
        if reason:
            run.stop_for(reason)
            return
