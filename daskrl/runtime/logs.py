"""Where log lines go during a run: into the run's log file, not between daskrl's own lines on the terminal.

Dask logs to stderr (``distributed - WARNING - Restarting worker ...`` in the middle of a progress view), and so
would daskrl's own loggers in worker processes. During a run, :func:`route_logs` sends every line of the loggers
below to one file in the experiment directory (the driver's, and on an embedded cluster its workers' too, through
the worker plugin), with full tracebacks, while the terminal shows only what the runner says. The few Dask warnings
that matter to a user are restated in daskrl's words (:class:`Restater`). With ``--log-level debug`` the driver's
records also go to the terminal (stderr), daskrl's down to debug and Dask's at the level Dask's config gives them.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: the loggers whose lines go to the run's log file (each with its handlers replaced while the run lasts)
ROUTED = ("distributed", "dask", "daskrl", "bokeh", "tornado", "asyncio")
FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"

#: Dask warnings worth a line of their own on the terminal: pattern -> what daskrl says instead
RESTATED = {
    re.compile(r"exceeded \d+% memory budget|exceeds the memory limit|out of memory", re.I):
        "a Dask worker ran out of memory and is being restarted (lower --num-envs-per-worker or --batch-size, or "
        "give the workers more memory)",
    re.compile(r"Unmanaged memory use is high|memory usage \d+% of limit", re.I):
        "a Dask worker is close to its memory limit",
}


class Restater(logging.Handler):
    """Says, once each, the Dask warnings of :data:`RESTATED` in daskrl's words through ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.say = say
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for pattern, restated in RESTATED.items():
            if pattern.search(message) and restated not in self.said:
                self.said.add(restated)
                self.say(f"daskrl: warning: {restated}; details in the run's log file")


class _Routes:
    """The runs of this process that route logs now. The first saves the loggers' own handlers and takes them over;
    each run adds its file (two runs started from one process both log to both files: a record does not say which
    run it is of); the last one to end puts the loggers' own handlers back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.saved: dict[str, tuple] | None = None
        self.handlers: list[logging.Handler] = []

    def add(self, handlers: list[logging.Handler], level: int) -> None:
        with self.lock:
            if self.saved is None:
                self.saved = {}
                for name in ROUTED:
                    logger = logging.getLogger(name)
                    self.saved[name] = (logger.handlers[:], logger.propagate, logger.level)
                    logger.handlers = []
                    logger.propagate = False
                    if logger.level == logging.NOTSET:  # a level Dask chose (bokeh: errors only) stays
                        logger.setLevel(level)
            self.handlers += handlers
            self._apply()

    def remove(self, handlers: list[logging.Handler]) -> None:
        with self.lock:
            self.handlers = [h for h in self.handlers if h not in handlers]
            if self.handlers or self.saved is None:
                self._apply()
                return
            for name, (own, propagate, level) in self.saved.items():
                logger = logging.getLogger(name)
                logger.handlers, logger.propagate = own, propagate
                logger.setLevel(level)
            self.saved = None

    def _apply(self) -> None:
        files = [h for h in self.handlers if not isinstance(h, Restater)]
        restaters = [h for h in self.handlers if isinstance(h, Restater)][:1]  # one restates for all
        for name in ROUTED:
            logging.getLogger(name).handlers = files + (restaters if name == "distributed" else [])


_routes = _Routes()


def _install(path: str, say: Callable[[str], None] | None, level: int, echo: bool = False) -> Callable[[], None]:
    """Point the :data:`ROUTED` loggers at ``path`` (too), and with ``echo`` at stderr as well; returns the function
    that takes it away again."""
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    mine: list[logging.Handler] = [handler] + ([Restater(say)] if say is not None else [])
    if echo:
        terminal = logging.StreamHandler(sys.stderr)
        terminal.setFormatter(logging.Formatter(FORMAT))
        mine.append(terminal)
    _routes.add(mine, level)

    def restore() -> None:
        _routes.remove(mine)
        handler.close()

    return restore


@contextmanager
def route_logs(path: str, say: Callable[[str], None] | None = None, level: int = logging.INFO,
               echo: bool = False) -> Iterator[str]:
    """Send the :data:`ROUTED` loggers of this process to ``path`` (appended) until the block ends, then put their
    handlers back. ``say`` also gets the restated Dask warnings; ``level``: daskrl's loggers' (and those of the
    others that have none of their own); ``echo``: the records go to stderr too (``--log-level debug``). Yields
    ``path``."""
    restore = _install(path, say, level, echo)
    try:
        yield path
    finally:
        restore()


def route_logs_for_good(path: str, level: int = logging.INFO) -> None:
    """:func:`route_logs` for the rest of this process's life (a worker process of an embedded cluster)."""
    _install(path, None, level)
