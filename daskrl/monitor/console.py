"""Progress of a run on the terminal: a live view on a TTY, plain lines everywhere else; and which of the run's
own lines the terminal shows (``--log-level``).

A person watching a terminal wants one place that moves (a bar toward the step or time budget, frames/s,
return, ETA); a log file, a pipe or CI wants one greppable line per report. :class:`ConsoleView` picks by
``stream.isatty()``; the plain line is the format the runner has always printed.

Each line the run says has a level: its warnings (``daskrl: warning: ...``) are warnings, the rest (what it
started, recovered, stopped; the progress lines) are info. ``--log-level warning`` keeps only the warnings, and
``error`` none of them (the failure that ends a run is the command's own message); the level is per process, and
while several runs of one process are live the most talkative one's holds (:func:`console_level`).
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from daskrl.monitor.stats import as_number

#: the values of ``--log-level``
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
DEFAULT_LEVEL = logging.INFO
_levels: dict[int, int] = {}  # the live runs' levels, by a number each run holds
_levels_lock = threading.Lock()
_tokens = itertools.count()


def shown_level() -> int:
    """The level from which the console shows the run's lines: the lowest any live run asked for, else info."""
    with _levels_lock:
        return min(_levels.values(), default=DEFAULT_LEVEL)


def shows(level: int) -> bool:
    return level >= shown_level()


@contextmanager
def console_level(name: str) -> Iterator[int]:
    """While the block runs, the console shows the lines of level ``name`` (a key of :data:`LOG_LEVELS`) and up."""
    token, level = next(_tokens), LOG_LEVELS[name]
    with _levels_lock:
        _levels[token] = level
    try:
        yield level
    finally:
        with _levels_lock:
            del _levels[token]


def say(line: str, level: int = logging.INFO) -> None:
    """One line of the run's own output (``daskrl: ...``) on stdout, flushed at once, when ``--log-level`` shows
    ``level``."""
    if shows(level):
        print(line, flush=True, file=sys.stdout)


def say_warning(line: str) -> None:
    """A line at warning level (``daskrl: warning: ...``: the caller words it)."""
    say(line, logging.WARNING)


def warn(message: str) -> None:
    """``daskrl: warning: <message>`` on the console."""
    say_warning(f"daskrl: warning: {message}")


def episodes_note(row: dict[str, Any], window: int) -> str:
    """How many episodes a reported mean covers: the total so far, or, until ``window`` have finished, how few of
    the window the mean holds (a mean of the first few episodes is no judgement of the policy)."""
    total, in_mean = int(row.get("episodes", 0) or 0), int(row.get("episodes_in_mean", window) or 0)
    return f"{total} ep" if in_mean >= window else f"{in_mean} of {window} ep"


#: the column a run's progress is read from, and its name on the console: env steps, or an offline run's updates
ENV_STEPS, UPDATES = ("env_steps", "env steps"), ("learner_updates", "updates")


def progress_line(row: dict[str, Any], window: int = 100, counted: tuple[str, str] = ENV_STEPS,
                  evaluation: dict[str, Any] | None = None) -> str:
    """The plain progress line of one report (``[  12.0s] env steps  123,456 | fps ... | return ...``). An offline
    run's (``counted``: :data:`UPDATES`) plays no episodes: it shows its newest ``evaluation`` row instead."""
    ret, lag = as_number(row.get("episode_return_mean")), as_number(row.get("policy_lag"))
    ret_s = "n/a" if math.isnan(ret) else f"{ret:.1f}±{as_number(row.get('episode_return_std')):.1f}"
    column, label = counted
    played = evaluation_note(evaluation) if counted == UPDATES else \
        f"fps {as_number(row.get('fps'), 0.0):>9,.0f} | return {ret_s} ({episodes_note(row, window)})"
    return (f"[{as_number(row.get('time_s'), 0.0):7.1f}s] {label} {int(as_number(row.get(column), 0)):>11,} | "
            f"{played} | version {row.get('policy_version', 0)}" + ("" if math.isnan(lag) else f" | lag {lag:.1f}"))


def evaluation_note(evaluation: dict[str, Any] | None) -> str:
    """An offline run's newest evaluation (--eval-interval-updates), or that there is none yet."""
    if not evaluation:
        return "eval return n/a"
    return (f"eval return {as_number(evaluation.get('eval_return_mean')):.1f}"
            f"±{as_number(evaluation.get('eval_return_std')):.1f} at {int(evaluation.get('eval_updates', 0)):,} updates")


class ConsoleView:
    """Shows each report: live (rich) when ``stream`` is a terminal, a plain line per report otherwise.

    ``total_env_steps`` and ``total_seconds`` are the run's budgets (0 = none), compared with the rows'
    ``env_steps`` and ``time_s``; the bar shows whichever is closer to its end. An offline run counts its
    ``learner_updates`` instead (``counted``: :data:`UPDATES`, its budget then in updates).
    """

    def __init__(self, total_env_steps: int, total_seconds: float, stream: TextIO | None = None,
                 window: int = 100, counted: tuple[str, str] = ENV_STEPS) -> None:
        """``window``: the episodes a full mean covers (--stop-window); a mean of fewer says so."""
        self.window, self.counted = window, counted
        self.evaluation: dict[str, Any] | None = None  # the newest row with an evaluation (an offline run shows it)
        self.total_env_steps = int(total_env_steps or 0)
        self.total_seconds = float(total_seconds or 0.0)
        self.stream = sys.stdout if stream is None else stream
        self._progress = None
        self._task = None
        self.live = _isatty(self.stream)
        if self.live:
            self.live = self._start_live()

    def _start_live(self) -> bool:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        console = Console(file=self.stream)
        if not console.is_terminal or console.is_dumb_terminal:  # e.g. TERM=dumb: no cursor movement
            return False
        owns_stdout = self.stream is sys.stdout
        self._progress = Progress(
            TextColumn("[bold]daskrl[/]"), BarColumn(bar_width=30), TaskProgressColumn(),
            TextColumn("{task.fields[info]}"), console=console, auto_refresh=False, transient=False,
            redirect_stdout=owns_stdout, redirect_stderr=owns_stdout)
        has_budget = bool(self.total_env_steps or self.total_seconds)
        self._task = self._progress.add_task("train", total=1000 if has_budget else None, info="starting…")
        self._progress.start()
        return True

    def update(self, row: dict[str, Any]) -> None:
        """Show one report (a row of metrics.csv)."""
        if not math.isnan(as_number(row.get("eval_return_mean"))):
            self.evaluation = row
        if not self.live:
            self.stream.write(progress_line(row, self.window, self.counted, self.evaluation) + "\n")
            self.stream.flush()
            return
        fraction = self.fraction(row)
        self._progress.update(self._task, completed=None if fraction is None else round(1000 * fraction),
                              info=self.live_text(row))
        self._progress.refresh()

    def fraction(self, row: dict[str, Any]) -> float | None:
        """Share of the budget used (the nearer of steps and seconds), None without a budget."""
        parts = []
        if self.total_env_steps:
            parts.append(as_number(row.get(self.counted[0]), 0.0) / self.total_env_steps)
        if self.total_seconds:
            parts.append(as_number(row.get("time_s"), 0.0) / self.total_seconds)
        return min(1.0, max(parts)) if parts else None

    def eta(self, row: dict[str, Any]) -> float | None:
        """Seconds left until the first budget runs out (steps at the current frames/s), None if unknown."""
        left = []
        fps = as_number(row.get("fps"), 0.0)
        if self.total_env_steps and fps > 0:
            left.append(max(0.0, self.total_env_steps - as_number(row.get("env_steps"), 0.0)) / fps)
        if self.total_seconds:
            left.append(max(0.0, self.total_seconds - as_number(row.get("time_s"), 0.0)))
        return min(left) if left else None

    def live_text(self, row: dict[str, Any]) -> str:
        steps = int(as_number(row.get(self.counted[0]), 0))
        ret, lag = as_number(row.get("episode_return_mean")), as_number(row.get("policy_lag"))
        eta = self.eta(row)
        played = [evaluation_note(self.evaluation)] if self.counted == UPDATES else [
            f"{as_number(row.get('fps'), 0.0):,.0f} fps",
            "return n/a" if math.isnan(ret)
            else f"return {ret:.1f}±{as_number(row.get('episode_return_std')):.1f} ({episodes_note(row, self.window)})"]
        parts = [f"{steps:,}" + (f"/{self.total_env_steps:,}" if self.total_env_steps else "")
                 + (" updates" if self.counted == UPDATES else " steps"), *played,
                 f"v{row.get('policy_version', 0)}" + ("" if math.isnan(lag) else f" lag {lag:.1f}"),
                 f"{as_number(row.get('time_s'), 0.0):,.0f}s" + ("" if eta is None else f" ETA {_clock(eta)}")]
        return " | ".join(parts)

    def close(self) -> None:
        """End the live view (its last state stays on screen); safe to call twice."""
        progress, self._progress = self._progress, None
        if progress is not None:
            try:
                progress.stop()
            except Exception:  # the terminal went away: nothing left to show
                pass


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


