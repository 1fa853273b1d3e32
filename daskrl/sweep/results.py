"""A sweep's results across seeds, the way RL papers now report them (Agarwal et al., 2021, "Deep RL at the edge
of the statistical precipice"; their library is rliable): each configuration's interquartile mean (IQM) of its
seeds' final returns (scores across tasks and seeds, with tasks: :mod:`.tasks`) with a 95% bootstrap confidence
interval, stratified by task as rliable's (each task's runs resampled on their own, so every resample keeps every
task), its learning curve as the mean over seeds with a 95% bootstrap band, its performance profile (the share of
runs above each score), the probability that one configuration improves on another, and the configurations ranked.
Numpy only: the few lines rliable's estimators need."""

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


def stratified_bootstrap_ci(groups: list[np.ndarray], statistic: Any = iqm, seed: int = 0) -> tuple[float, float]:
    """The 95% percentile interval of ``statistic`` over all runs, resampling each group's runs (a task's seeds)
    with replacement on its own: rliable's ``StratifiedBootstrap``. A plain bootstrap over the pooled runs could
    draw a resample with no run of a hard task, and its interval would say more than the sweep measured."""
    groups = [np.asarray(g, float) for g in groups if len(g)]
    if sum(len(g) for g in groups) < 2:
        return bootstrap_ci(np.concatenate(groups) if groups else np.array([]), statistic, seed)
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([g[rng.integers(0, len(g), size=(RESAMPLES, len(g)))] for g in groups], axis=1)
    stats = statistic(pooled, axis=1)
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The share of runs (every task's seeds) whose score is above each threshold in ``taus``: rliable's run-score
    distribution, which shows the whole spread where an IQM shows its middle."""
    scores = np.asarray(scores, float).ravel()
    return np.array([np.mean(scores > tau) for tau in np.asarray(taus, float)])


def probability_of_improvement(x_by_task: list[np.ndarray], y_by_task: list[np.ndarray]) -> float:
    """P(X > Y): the chance that a run of configuration X scores above a run of Y on the same task, averaged over the
    tasks (ties count half): rliable's probability of improvement, the Mann-Whitney U statistic over n x m pairs."""
    per_task = []
    for x, y in zip(x_by_task, y_by_task, strict=True):
        x, y = np.asarray(x, float)[:, None], np.asarray(y, float)[None, :]
        if x.size and y.size:
            per_task.append(float(np.mean((x > y) + 0.5 * (x == y))))
    return float(np.mean(per_task)) if per_task else math.nan


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
        by_task = finals_by_task(mine)
        finals = np.concatenate(list(by_task.values())) if by_task else np.array([])
        statuses = {r["status"] for r in mine}
        status = "finished" if statuses == {"finished"} else "stopped" if "stopped" in statuses else \
            "failed" if statuses == {"failed"} else "/".join(sorted(statuses))
        out.append(Ranked(index, mine[0]["params"], len(mine), status,
                          float(finals.mean()) if len(finals) else math.nan,
                          float(iqm(finals)) if len(finals) else math.nan,
                          stratified_bootstrap_ci(list(by_task.values())) if len(finals) else (math.nan, math.nan),
                          int(np.mean([r["env_steps"] for r in mine]))))
    order = {"finished": 0, "stopped": 2, "failed": 3}
    return sorted(out, key=lambda r: (order.get(r.status, 1), -(r.iqm if not math.isnan(r.iqm) else -math.inf)))


def finals_by_task(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The final scores of these trials (one configuration's), grouped by task ('' for a sweep without tasks)."""
    out: dict[str, list[float]] = {}
    for row in rows:
        if not math.isnan(row["final_score"]):
            out.setdefault(row.get("task") or "", []).append(row["final_score"])
    return {task: np.array(values) for task, values in sorted(out.items())}


def best(rows: list[dict[str, Any]]) -> Ranked | None:
    """The configuration a sweep picks: the best ranked one that ran its full budget with every seed."""
    ranked = [r for r in rank(rows) if r.status == "finished"]
    return ranked[0] if ranked else None
