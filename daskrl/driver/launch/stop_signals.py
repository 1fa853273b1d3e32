"""Ctrl-C and SIGTERM during a run: the first asks the runner's loop to stop in order (final checkpoint, components
stopped, exit 0); a second one stops waiting politely."""

from __future__ import annotations

import signal
import threading


class StopOnSignals:
    """Ctrl-C and SIGTERM ask the loop to stop (checkpoint, stop components, exit 0) instead of raising."""

    def __init__(self) -> None:
        self.requested = ""
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:  # a second Ctrl-C: stop waiting politely
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
