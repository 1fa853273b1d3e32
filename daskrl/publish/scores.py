"""What a bundle reports as measured: evaluation episodes played by ``daskrl enjoy``'s own code, per seed, and
over several seeds the interquartile mean with its 95% bootstrap interval (the sweep's estimators, rliable's).

Each seed is evaluated by :func:`daskrl.evaluation.enjoy` with the same episodes, env seed and action choice, so
the card's value for the bundled policy is what ``daskrl enjoy --episodes N --seed S`` prints for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskrl.evaluation import enjoy
from daskrl.evaluation.episodes import trained_for
from daskrl.sweep.results import RESAMPLES, iqm, stratified_bootstrap_ci


@dataclass(frozen=True)
class Evaluation:
    """How the episodes were played: enough to play them again."""

    episodes: int
    seed: int
    deterministic: bool
    checkpoint: str

    def enjoy_command(self, folder: str = ".") -> str:
        """The ``daskrl enjoy`` command that plays these episodes again on a bundle."""
        return (f"daskrl enjoy --from {folder} --episodes {self.episodes} --seed {self.seed}"
                + (" --deterministic" if self.deterministic else ""))


@dataclass
class SeedResult:
    """One experiment's evaluation."""

    experiment_dir: str
    run_seed: int
    return_mean: float
    return_std: float
    length_mean: float
    env_steps_trained: int
    returns: list[float] = field(default_factory=list)
    updates_trained: int = 0
    offline: bool = False  # trained from a dataset alone: its updates say what it was trained for

    def as_dict(self) -> dict[str, Any]:
        return {"experiment": os.path.basename(os.path.normpath(self.experiment_dir)), "run_seed": self.run_seed,
                "return_mean": self.return_mean, "return_std": self.return_std, "length_mean": self.length_mean,
                "env_steps_trained": self.env_steps_trained, "updates_trained": self.updates_trained,
                "offline": self.offline, "returns": self.returns}

    @property
    def trained_for(self) -> str:
        return trained_for(self.as_dict())


@dataclass(frozen=True)
class AcrossSeeds:
    """The interquartile mean of the seeds' mean returns and its 95% stratified bootstrap interval."""

    seeds: int
    iqm: float
    ci: tuple[float, float]
    resamples: int = RESAMPLES


def evaluate(experiment_dir: str, run_seed: int, how: Evaluation) -> SeedResult:
    """Play ``how.episodes`` episodes of the experiment's policy as ``daskrl enjoy`` does."""
    result = enjoy(experiment_dir, how.episodes, how.checkpoint, deterministic=how.deterministic, seed=how.seed)
    return SeedResult(experiment_dir, run_seed, result["return_mean"], result["return_std"], result["length_mean"],
                      result["env_steps_trained"], [float(r) for r in result["returns"]], result["updates_trained"],
                      result["offline"])


def across_seeds(results: list[SeedResult]) -> AcrossSeeds:
    """IQM and interval over the seeds (one task: every resample draws from the same seeds)."""
    means = np.array([r.return_mean for r in results], float)
    return AcrossSeeds(len(results), float(iqm(means)), stratified_bootstrap_ci([means]))


def representative(results: list[SeedResult], summary: AcrossSeeds) -> SeedResult:
    """The seed whose mean return is nearest the IQM: the policy a bundle of several seeds carries (the best seed
    would report luck as the method's result)."""
    return min(results, key=lambda r: (abs(r.return_mean - summary.iqm), r.run_seed))
