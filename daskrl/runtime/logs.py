"""Where log lines go during a run: into the run's log file, not between daskrl's own lines on the terminal.

Dask logs to stderr (``distributed - WARNING - Restarting worker ...`` in the middle of a progress view), and so
would daskrl's own loggers in worker processes. During a run, :func:`route_logs` sends every line of the loggers
below to one file in the experiment directory (the driver's, and on an embedded cluster its workers' too, through
the worker plugin), with full tracebacks, while the terminal shows only what the runner says. The few Dask warnings
that matter to a user are restated in daskrl's words (:class:`Restater`).
"""

from __future__ import annotations

import logging
import re
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


def _install(path: str, say: Callable[[str], None] | None, level: int) -> Callable[[], None]:
    """Point the :data:`ROUTED` loggers at ``path``; returns the function that puts their handlers back."""
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    restater = Restater(say) if say is not None else None
    saved = {}
    for name in ROUTED:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate, logger.level)
        logger.handlers = [handler] + ([restater] if restater and name == "distributed" else [])
        logger.propagate = False
        if logger.level == logging.NOTSET:  # a level Dask chose (bokeh: errors only) stays
            logger.setLevel(level)

    def restore() -> None:
        for name, (handlers, propagate, lvl) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(lvl)
        handler.close()

    return restore


@contextmanager
def route_logs(path: str, say: Callable[[str], None] | None = None, level: int = logging.INFO) -> Iterator[str]:
    """Send the :data:`ROUTED` loggers of this process to ``path`` (appended) until the block ends, then put their
    handlers back. ``say`` also gets the restated Dask warnings. Yields ``path``."""
    restore = _install(path, say, level)
    try:
        yield path
    finally:
        restore()


def route_logs_for_good(path: str, level: int = logging.INFO) -> None:
    """:func:`route_logs` for the rest of this process's life (a worker process of an embedded cluster)."""
    _install(path, None, level)
