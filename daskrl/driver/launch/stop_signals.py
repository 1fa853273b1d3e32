"""Ctrl-C and SIGTERM during a run: the first asks the runner's loop to stop in order (final checkpoint, components
stopped, exit 0); a second one stops waiting politely, in one line.

The second one raises KeyboardInterrupt wherever the driver is, often inside ``distributed.utils.sync`` waiting for the
event loop. That function then schedules a callback that cancels what it waited for, and when the interrupt came
before the wait had begun, the callback fails (NameError on its ``future``: distributed 2026.8.0) and Tornado logs
the failure with its traceback. So the second signal first quiets Tornado's error log: the process is leaving
without waiting, and an event loop callback cut short then is no news. It stays quiet for the rest of the process
(the callback may run after the run has unwound): the command exits, and a notebook whose run was interrupted twice
keeps Dask's own error lines only."""

from __future__ import annotations

import logging
import signal
import threading

#: the logger Tornado reports a failed event-loop callback on
EVENT_LOOP_ERRORS = "tornado.application"


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
            logging.getLogger(EVENT_LOOP_ERRORS).disabled = True  # (see the module docstring)
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
