"""The runtime's Timing (daskrl/runtime/actors/timing.py) with no cluster: a nested block is booked to the inner
activity only, so one thread's shares never add up to more than its wall time."""

from __future__ import annotations

import time

import pytest

from daskrl.runtime.actors.timing import Timing


def test_timing_books_nested_blocks_to_the_inner_activity_only():
    """Shares of one thread never add up to more than its wall time: an outer block pauses while an inner one runs
    (before, the outer span was booked to the inner name)."""
    timing = Timing()
    with timing("outer"):
        time.sleep(0.05)
        with timing("inner"):
            time.sleep(0.1)
        time.sleep(0.05)
    seconds = timing.summary()["seconds"]
    assert seconds["inner"] == pytest.approx(0.1, abs=0.03)
    assert seconds["outer"] == pytest.approx(0.1, abs=0.03)
    assert sum(seconds.values()) <= timing.summary()["wall_s"]
