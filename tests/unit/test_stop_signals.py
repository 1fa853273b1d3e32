"""Ctrl-C during a run (daskrl/driver/launch/stop_signals.py): the first asks for a stop in order, the second stops
waiting, and what the second cuts short on Dask's event loop prints nothing."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest
from distributed.utils import LoopRunner, sync

from daskrl.driver.launch.stop_signals import EVENT_LOOP_ERRORS, StopOnSignals


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_second_ctrl_c_inside_a_wait_on_the_event_loop_leaves_no_traceback_behind():
    """distributed's sync() answers an interrupt with a callback that cancels what it waited for; interrupted before
    the wait began (the loop busy), that callback fails (NameError on its ``future``) and Tornado logs the traceback,
    which a second Ctrl-C printed under its one line (seen in tests/drills/test_cli.py)."""
    runner = LoopRunner(asynchronous=False)
    runner.start()
    kept = Kept()
    logging.getLogger(EVENT_LOOP_ERRORS).addHandler(kept)
    signals = StopOnSignals()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.requested == "SIGINT"  # the first: a stop in order, nothing raised
        runner.loop.add_callback(time.sleep, 0.5)  # the loop is busy when the second comes

        async def nothing() -> None:
            return None

        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            sync(runner.loop, nothing)
        time.sleep(1.0)  # the loop has run the cancelling callback
        assert not kept.records, [r.getMessage() for r in kept.records]
    finally:
        signals.restore()
        logging.getLogger(EVENT_LOOP_ERRORS).removeHandler(kept)
        logging.getLogger(EVENT_LOOP_ERRORS).disabled = False
        runner.stop()
