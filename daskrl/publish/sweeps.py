"""``daskrl publish --sweep DIR``: which of a sweep's trials a bundle reports, and what the sweep said of them.

The sweep's own choice (:func:`daskrl.sweep.results.best`: the configuration with the highest IQM of its seeds'
final training returns among those that ran their full budget with every seed) is the configuration published;
its seeds are then evaluated afresh, as ``daskrl enjoy`` plays them, by :mod:`.scores`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from daskrl.errors import ConfigError
from daskrl.sweep.results import best
from daskrl.sweep.spec import load_spec
from daskrl.sweep.trials import FINISHED, read_table


@dataclass(frozen=True)
class SweepChoice:
    """The chosen configuration of a sweep: its trials' experiment directories and its training-return summary."""

    sweep_dir: str
    name: str
    configuration: int
    params: dict[str, Any]
    experiment_dirs: list[str]
    seeds: list[int]
    training_iqm: float
    training_ci: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return {"sweep": self.name, "configuration": self.configuration, "params": self.params, "seeds": self.seeds,
                "trials": [os.path.basename(d) for d in self.experiment_dirs],
                "final_training_return_iqm": self.training_iqm, "final_training_return_ci95": list(self.training_ci)}


def choose(sweep_dir: str) -> SweepChoice:
    """The configuration the sweep picked, refused in one line where the sweep has none to give."""
    sweep_dir = os.path.normpath(sweep_dir)
    if not os.path.isfile(os.path.join(sweep_dir, "sweep.csv")):
        raise ConfigError([f"--sweep {sweep_dir!r} is not a sweep directory with trials (no sweep.csv): check "
                           "the path, or run the sweep first"])
    rows = read_table(sweep_dir)
    if not rows:
        raise ConfigError([f"--sweep {sweep_dir!r} has no trials yet: run it (daskrl sweep --resume {sweep_dir})"])
    if load_spec(os.path.join(sweep_dir, "sweep.json")).tasks:
        raise ConfigError([f"--sweep {sweep_dir!r} runs each configuration on several tasks: a bundle holds one "
                           "env's policy, so publish one trial with --experiment TRIAL --train-dir "
                           f"{sweep_dir}"])
    chosen = best(rows)
    if chosen is None:
        raise ConfigError([f"--sweep {sweep_dir!r}: no configuration ran its full budget with every seed (see "
                           f"{sweep_dir}/sweep.csv): resume the sweep, or publish one trial with --experiment"])
    mine = sorted((r for r in rows if r["configuration"] == chosen.configuration and r["status"] == FINISHED),
                  key=lambda r: r["seed"])
    return SweepChoice(sweep_dir, os.path.basename(sweep_dir), chosen.configuration, chosen.params,
                       [os.path.join(sweep_dir, r["trial"]) for r in mine], [r["seed"] for r in mine],
                       chosen.iqm, chosen.ci)
