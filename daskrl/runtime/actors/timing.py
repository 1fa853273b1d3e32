"""Where a component's time goes: seconds per activity, as shares of its wall time.

``with timing("env"): ...`` books the block's seconds to "env". Blocks nest: an inner block's time is booked to
the inner activity only, and the outer one pauses meanwhile, so the shares of one thread never add up to more
than its wall time (the runner's time-breakdown bars rely on that).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any


class _Span:
    __slots__ = ("timing", "key")

    def __init__(self, timing: Timing, key: str) -> None:
        self.timing, self.key = timing, key

    def __enter__(self) -> None:
        self.timing.enter(self.key)

    def __exit__(self, *exc: Any) -> None:
        self.timing.leave()


class Timing:
    """Seconds per activity of one thread (see the module docstring)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.started = time.perf_counter()
        self._open: list[list] = []  # [activity, when it last started or resumed], innermost last

    def __call__(self, key: str) -> _Span:
        return _Span(self, key)

    def enter(self, key: str) -> None:
        now = time.perf_counter()
        if self._open:  # pause the enclosing activity
            outer = self._open[-1]
            self.totals[outer[0]] += now - outer[1]
        self._open.append([key, now])

    def leave(self) -> None:
        now = time.perf_counter()
        key, since = self._open.pop()
        self.totals[key] += now - since
        if self._open:  # resume the enclosing activity
            self._open[-1][1] = now

    def add(self, key: str, seconds: float) -> None:
        self.totals[key] += seconds

    def summary(self) -> dict[str, Any]:
        wall = max(time.perf_counter() - self.started, 1e-9)
        totals = dict(self.totals)
        return {"wall_s": wall, "seconds": totals, "share": {k: v / wall for k, v in totals.items()}}
