"""A sweep's trials and what is written about them: ``sweep.csv`` (one row per trial, rewritten at every change)
and ``sweep_state.json`` (what ``--resume`` needs: every trial's configuration, seed, status and rung values).

A trial is one configuration with one seed (on one task, with tasks): a daskrl run whose experiment is
``<sweep>/c<config>-s<seed>`` (``c<config>-<task>-s<seed>``), so the sweep directory holds one experiment per trial
and the cluster's run names stay unique across sweeps.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from daskrl.sweep.tasks import env_slug

#: a trial's statuses: still to run, training, ended at its budget, stopped early (ASHA or a pruner), failed,
#: stopped by Ctrl-C (run again by --resume)
QUEUED, RUNNING, FINISHED, STOPPED, FAILED, INTERRUPTED = (
    "queued", "running", "finished", "stopped", "failed", "interrupted")
#: statuses --resume does not run again
ENDED = (FINISHED, STOPPED, FAILED)
CSV_COLUMNS = ("trial", "configuration", "params", "task", "seed", "status", "env_steps", "final_return",
               "final_score", "best_return", "wall_time_s", "restarts", "note")


@dataclass
class Trial:
    config_index: int
    seed: int
    params: dict[str, Any]
    status: str = QUEUED
    env_steps: int = 0
    final_return: float = math.nan
    best_return: float = math.nan
    wall_time_s: float = 0.0
    restarts: int = 0
    note: str = ""
    #: the configuration's rungs this trial reached: env steps -> its score there
    rung_values: dict[int, float] = field(default_factory=dict)
    #: its env, in a sweep with tasks ("" without: the base's env)
    task: str = ""
    #: what its final return counts for (:meth:`SweepSpec.score`: the return itself without tasks)
    final_score: float = math.nan

    @property
    def trial_id(self) -> str:
        task = f"-{env_slug(self.task)}" if self.task else ""
        return f"c{self.config_index:03d}{task}-s{self.seed}"

    def observe(self, env_steps: int, mean_return: float) -> None:
        """A newer status of its run: env steps, and the recent mean return (NaN before the first episode)."""
        self.env_steps = max(self.env_steps, int(env_steps))
        if not math.isnan(mean_return):
            self.final_return = float(mean_return)
            self.best_return = mean_return if math.isnan(self.best_return) else max(self.best_return, mean_return)

    def row(self) -> dict[str, Any]:
        return {"trial": self.trial_id, "configuration": self.config_index, "params": json.dumps(self.params),
                "task": self.task, "seed": self.seed, "status": self.status, "env_steps": self.env_steps,
                "final_return": _round(self.final_return), "final_score": _round(self.final_score),
                "best_return": _round(self.best_return),
                "wall_time_s": round(self.wall_time_s, 1), "restarts": self.restarts, "note": self.note}


def _round(x: float) -> float | str:
    return "" if math.isnan(x) else round(x, 3)


def write_table(sweep_dir: str, trials: list[Trial]) -> None:
    """``sweep.csv`` and ``sweep_state.json``, each replaced whole (a reader never sees half a file)."""
    _replace(os.path.join(sweep_dir, "sweep.csv"), lambda f: _write_csv(f, trials))
    state = [{**asdict(t), "rung_values": {str(k): v for k, v in t.rung_values.items()}} for t in trials]
    _replace(os.path.join(sweep_dir, "sweep_state.json"), lambda f: json.dump({"trials": state}, f, indent=1))


def _write_csv(f: Any, trials: list[Trial]) -> None:
    writer = csv.DictWriter(f, CSV_COLUMNS)
    writer.writeheader()
    for t in sorted(trials, key=lambda t: (t.config_index, t.task, t.seed)):
        writer.writerow(t.row())


def _replace(path: str, write: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        write(f)
    os.replace(tmp, path)


def read_trials(sweep_dir: str) -> list[Trial]:
    """The trials ``sweep_state.json`` holds (empty for a sweep that never started one)."""
    path = os.path.join(sweep_dir, "sweep_state.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    trials = []
    for raw in data["trials"]:
        raw["rung_values"] = {int(k): v for k, v in raw.get("rung_values", {}).items()}
        trials.append(Trial(**raw))
    return trials


def read_table(sweep_dir: str) -> list[dict[str, Any]]:
    """The rows of ``sweep.csv`` (numbers as numbers, params as a dict)."""
    with open(os.path.join(sweep_dir, "sweep.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["params"] = json.loads(row["params"])
        for key in ("configuration", "seed", "env_steps", "restarts"):
            row[key] = int(row[key])
        row.setdefault("task", "")
        for key in ("final_return", "best_return", "wall_time_s"):
            row[key] = float(row[key]) if row[key] != "" else math.nan
        score = row.get("final_score")  # None: a table written before sweeps had tasks, scored by its returns
        row["final_score"] = row["final_return"] if score is None else float(score) if score != "" else math.nan
    return rows
