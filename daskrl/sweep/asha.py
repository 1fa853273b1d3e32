"""Asynchronous successive halving (ASHA, Li et al. 2020) on env-step rungs.

A configuration that reaches a rung (with every seed) goes on only when its value there is in the best ``1 /
reduction`` of the values other configurations had at that rung so far; the first to arrive always goes on. No
configuration waits for another (trials start and stop as workers free up), which is what makes it asynchronous:
a configuration may go on that a synchronous halving would have stopped, never the reverse for the ones that
arrive late and bad. Pure: tested without a cluster.
"""

from __future__ import annotations

import math


class ASHA:
    def __init__(self, rungs: list[int], reduction: int) -> None:
        self.rungs = list(rungs)
        self.reduction = reduction
        self.recorded: dict[int, dict[int, float]] = {step: {} for step in self.rungs}

    def decide(self, config: int, step: int, value: float) -> bool:
        """Record configuration ``config``'s ``value`` at rung ``step``; True when it goes on. A NaN value (no
        finished episode yet) ranks below every number."""
        others = [v for c, v in self.recorded[step].items() if c != config]
        self.recorded[step][config] = value
        if not others:
            return True
        return _key(value) >= _cutoff(others, self.reduction)

    def restore(self, config: int, step: int, value: float) -> None:
        """A decision made before a resume, recorded again."""
        self.recorded[step][config] = value


def _key(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _cutoff(values: list[float], reduction: int) -> float:
    """The value the best ``1 / reduction`` of ``values`` reach: the ``1 - 1/reduction`` quantile, interpolated
    linearly as numpy's percentile does."""
    ordered = sorted(_key(v) for v in values)
    position = (1 - 1 / reduction) * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    if ordered[low] == -math.inf or ordered[high] == -math.inf:
        return ordered[high]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
