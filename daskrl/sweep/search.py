"""How a sweep chooses its configurations: every point of a grid, random draws, or Optuna's samplers.

A searcher hands out configurations one at a time (``ask``) and hears how each ended (``tell``: the mean over its
seeds of the metric, or that it was stopped early at some rung). Grid and random searches ignore what they hear;
Optuna's TPE and CMA-ES learn from it, and Optuna's median pruner decides early stopping for them. Optuna keeps
its study in the sweep directory (a journal file), so ``--resume`` continues the same study.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from typing import Any

from daskrl.errors import ConfigError
from daskrl.sweep.spec import Domain, SweepSpec


class Searcher:
    """Configurations to try, in order; ``ask`` returns None when there are no more."""

    def ask(self, index: int) -> dict[str, Any] | None:
        raise NotImplementedError

    def report(self, index: int, step: int, value: float) -> bool:
        """A configuration's value at a rung; True when the searcher's own pruner stops it (only Optuna's does)."""
        return False

    def tell(self, index: int, value: float | None, pruned: bool) -> None:
        """How configuration ``index`` ended (``value`` None: it failed)."""


class GridSearch(Searcher):
    def __init__(self, spec: SweepSpec) -> None:
        names = list(spec.space)
        self.points = [dict(zip(names, combo, strict=True))
                       for combo in itertools.product(*(spec.space[n].values for n in names))]

    def ask(self, index: int) -> dict[str, Any] | None:
        return self.points[index] if index < len(self.points) else None


class RandomSearch(Searcher):
    """Each configuration drawn from its own seeded generator, so configuration ``i`` is the same on a resume."""

    def __init__(self, spec: SweepSpec) -> None:
        self.spec = spec

    def ask(self, index: int) -> dict[str, Any] | None:
        if index >= self.spec.trials:
            return None
        rng = random.Random(f"{self.spec.search_seed}:{index}")
        return {name: draw(domain, rng) for name, domain in self.spec.space.items()}


def draw(domain: Domain, rng: random.Random) -> Any:
    if domain.values:
        return rng.choice(domain.values)
    if domain.log:
        value = math.exp(rng.uniform(math.log(domain.low), math.log(domain.high)))
    else:
        value = rng.uniform(domain.low, domain.high)
    return int(round(value)) if domain.integer else value


class OptunaSearch(Searcher):
    """Optuna's TPE or CMA-ES sampler (and its median pruner where the spec asks for it) on a study stored in the
    sweep directory."""

    def __init__(self, spec: SweepSpec, sweep_dir: str) -> None:
        optuna = import_optuna()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = (optuna.samplers.TPESampler(seed=spec.search_seed) if spec.search == "tpe"
                   else optuna.samplers.CmaEsSampler(seed=spec.search_seed, warn_independent_sampling=False))
        pruner = optuna.pruners.MedianPruner(n_startup_trials=2) if spec.early_stopping == "median" \
            else optuna.pruners.NopPruner()
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(os.path.join(sweep_dir, "optuna.journal")))
        self.study = optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler, pruner=pruner,
                                         direction="maximize", load_if_exists=True)
        self.spec = spec
        self.trials: dict[int, Any] = {}
        self._adopt_stored()

    def _adopt_stored(self) -> None:
        """On a resume: the study's trials that were asked and never told belong to configurations still to finish."""
        import optuna

        for index, frozen in enumerate(self.study.trials):
            running = frozen.state == optuna.trial.TrialState.RUNNING
            self.trials[index] = optuna.trial.Trial(self.study, frozen._trial_id) if running else frozen

    def ask(self, index: int) -> dict[str, Any] | None:
        if index >= self.spec.trials:
            return None
        if index in self.trials:  # asked before a resume: the same values
            return dict(self.trials[index].params)
        trial = self.study.ask()
        self.trials[index] = trial
        return {name: self._suggest(trial, name, domain) for name, domain in self.spec.space.items()}

    @staticmethod
    def _suggest(trial: Any, name: str, domain: Domain) -> Any:
        if domain.values:
            return trial.suggest_categorical(name, list(domain.values))
        if domain.integer:
            return trial.suggest_int(name, int(domain.low), int(domain.high), log=domain.log)
        return trial.suggest_float(name, domain.low, domain.high, log=domain.log)

    def report(self, index: int, step: int, value: float) -> bool:
        trial = self._live(index)
        if trial is None:
            return False
        trial.report(value, step)
        return trial.should_prune()

    def tell(self, index: int, value: float | None, pruned: bool) -> None:
        import optuna

        if self._live(index) is None:
            return
        state = optuna.trial.TrialState.PRUNED if pruned else \
            optuna.trial.TrialState.FAIL if value is None else optuna.trial.TrialState.COMPLETE
        self.study.tell(self.trials[index], None if pruned or value is None else value, state=state)
        self.trials[index] = self.study.trials[self.trials[index].number]  # told: frozen from now on

    def _live(self, index: int) -> Any:
        """The running Optuna trial of configuration ``index`` (None: told already, before a resume)."""
        import optuna

        trial = self.trials.get(index)
        if trial is None or isinstance(trial, optuna.trial.FrozenTrial):
            return None
        return trial


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError as exc:
        raise ConfigError(["search 'tpe' and 'cmaes' use Optuna, which is not installed: pip install "
                           "'daskrl[sweep]' (or choose search grid or random)"]) from exc
    return optuna


def make_searcher(spec: SweepSpec, sweep_dir: str) -> Searcher:
    if spec.search == "grid":
        return GridSearch(spec)
    if spec.search == "random":
        return RandomSearch(spec)
    return OptunaSearch(spec, sweep_dir)
