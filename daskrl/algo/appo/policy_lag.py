"""Percentiles of the policy lags a learner counted (numpy only: the learner's statistics read them in the driver's
polls, and the scale simulation from its rows)."""

from __future__ import annotations

import math

import numpy as np


def lag_percentile(counts: list[int] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0-100) of the policy lags counted in ``counts`` (``counts[k]``: samples trained on
    ``k`` versions after they were acted): the smallest lag that at least ``q`` % of the samples do not exceed.
    NaN when nothing was counted. Counts are kept rather than a mean so that a window's percentiles come from the
    difference of two readings."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total <= 0:
        return math.nan
    return float(np.searchsorted(np.cumsum(counts), q / 100.0 * total, side="left"))
