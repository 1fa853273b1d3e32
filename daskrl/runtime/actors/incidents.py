"""Failures that are survived on purpose, counted and logged so that none of them is silent.

Some errors must not stop a run: a metrics event that did not reach the scheduler, a bus message whose receiver
is gone, a parameter read that failed and will be retried. Each is noted here by kind: counted (the counts travel
with a component's statistics to the runner, the CSV and the dashboard) and logged, the first of each kind as a
warning (or the level its owner chose) with its cause and later ones at debug level, so a recurring one cannot flood a log.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict


class Incidents:
    """Counts per kind of survived failure (see the module docstring); thread-safe."""

    def __init__(self, logger: logging.Logger, where: str = "", level: int = logging.WARNING) -> None:
        self.logger, self.where, self.level = logger, where, level
        self.counts: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def note(self, kind: str, cause: object = "") -> None:
        """Count one incident of ``kind`` (a short stable name) with its ``cause`` (an exception or a message)."""
        with self._lock:
            self.counts[kind] += 1
            first = self.counts[kind] == 1
        detail = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)
        prefix = f"{self.where}: " if self.where else ""
        if first:
            self.logger.log(self.level, "%s%s (%s); counted as incident %r from now on", prefix, kind, detail, kind)
        else:
            self.logger.debug("%s%s (%s)", prefix, kind, detail)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
