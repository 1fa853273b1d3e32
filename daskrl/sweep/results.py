"""A sweep's results across seeds, the way RL papers now report them (Agarwal et al., 2021, "Deep RL at the edge
of the statistical precipice"; their library is rliable): each configuration's interquartile mean (IQM) of its
seeds' final returns (scores across tasks and seeds, with tasks: :mod:`.tasks`) with a 95% bootstrap confidence
interval, its learning curve as the mean over seeds with a
95% bootstrap band, and the configurations ranked. Numpy only: the few lines rliable's estimators need."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: bootstrap resamples of the seeds
RESAMPLES = 2000


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean: the mean of the middle half (a quarter cut from each end, as rliable does with
    ``scipy.stats.trim_mean(x, 0.25)``); robust to one outlying seed, less noisy than the median."""
    values = np.sort(np.asarray(values, float), axis=axis)
    n = values.shape[axis]
    cut = int(0.25 * n)
    return np.take(values, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_ci(values: np.ndarray, statistic: Any = iqm, seed: int = 0) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of ``statistic`` over the seeds (``values``: one number per seed)."""
    values = np.asarray(values, float)
    if len(values) < 2:
        return (float(values[0]), float(values[0])) if len(values) else (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    samples = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))]
    stats = statistic(samples, axis=1)
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def curve_band(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 100, seed: int = 0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeds' learning curves ``(env_steps, returns)`` on one grid of env steps (up to the shortest seed's end):
    the grid, the mean over seeds and the 95% bootstrap band of that mean."""
    end = min(float(x[-1]) for x, _ in curves)
    start = max(float(x[0]) for x, _ in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])  # seeds x points
    mean = ys.mean(axis=0)
    if len(curves) < 2:
        return grid, mean, mean, mean
    rng = np.random.default_rng(seed)
    means = ys[rng.integers(0, len(curves), size=(RESAMPLES, len(curves)))].mean(axis=1)
    return grid, mean, np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0)


@dataclass
class Ranked:
    """One configuration's results over its seeds."""

    configuration: int
    params: dict[str, Any]
    seeds: int
    status: str
    mean: float
    iqm: float
    ci: tuple[float, float]
    env_steps: int


def rank(rows: list[dict[str, Any]]) -> list[Ranked]:
    """``sweep.csv``'s rows grouped by configuration, best first: configurations that ran their full budget by the
    IQM of their seeds' final returns, then those stopped early (they never trained as long), failed ones last."""
    by_config: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_config.setdefault(row["configuration"], []).append(row)
    out = []
    for index, mine in sorted(by_config.items()):
        finals = np.array([r["final_score"] for r in mine if not math.isnan(r["final_score"])])
        statuses = {r["status"] for r in mine}
        status = "finished" if statuses == {"finished"} else "stopped" if "stopped" in statuses else \
            "failed" if statuses == {"failed"} else "/".join(sorted(statuses))
        out.append(Ranked(index, mine[0]["params"], len(mine), status,
                          float(finals.mean()) if len(finals) else math.nan,
                          float(iqm(finals)) if len(finals) else math.nan,
                          bootstrap_ci(finals) if len(finals) else (math.nan, math.nan),
                          int(np.mean([r["env_steps"] for r in mine]))))
    order = {"finished": 0, "stopped": 2, "failed": 3}
    return sorted(out, key=lambda r: (order.get(r.status, 1), -(r.iqm if not math.isnan(r.iqm) else -math.inf)))


def best(rows: list[dict[str, Any]]) -> Ranked | None:
    """The configuration a sweep picks: the best ranked one that ran its full budget with every seed."""
    ranked = [r for r in rank(rows) if r.status == "finished"]
    return ranked[0] if ranked else None
