"""What a sweep searches, read from a spec file (YAML or JSON) or from flags, and checked before any trial starts.

A spec names the options every trial shares (``base``), the options searched (``space``: a list of values, or a
range with ``low``/``high``, optionally ``log`` and ``type: int``), how configurations are chosen (``search``: grid,
random, or Optuna's ``tpe``/``cmaes``), how many seeds each configuration runs, the env steps of a full trial, the
early stopping (ASHA, Optuna's median pruner, or none), optionally the envs every configuration runs on
(``tasks``, judged by normalized scores: :mod:`.tasks`) and, optionally, PBT across the trials. Every problem is one
line, and all of them come at once: an unknown option (with a suggestion), an empty range, a value the option
refuses (checked by building each value into a real :class:`~daskrl.config.Config`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from daskrl.config import Config
from daskrl.config.hyperparams import MUTABLE
from daskrl.errors import ConfigError
from daskrl.sweep.tasks import Task, parse_tasks, tasks_json

SEARCHES = ("grid", "random", "tpe", "cmaes")
EARLY_STOPPING = ("asha", "median", "none")
#: options a sweep sets on each trial itself: a spec that names them is refused
SWEEP_OWNED = ("experiment", "train_dir", "seed", "train_for_env_steps", "resume", "overwrite", "scheduler")


@dataclass(frozen=True)
class Domain:
    """Where one option is searched: ``values`` (a list), or a range ``[low, high]`` (``log``: uniform in log space;
    ``integer``: whole numbers)."""

    values: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    @property
    def is_range(self) -> bool:
        return not self.values

    def candidates(self) -> tuple[Any, ...]:
        """Values that stand for the domain when checking it: its list, or its two ends."""
        if self.values:
            return self.values
        ends = (self.low, self.high)
        return tuple(int(v) for v in ends) if self.integer else ends


@dataclass(frozen=True)
class PBTSpec:
    """PBT across trials: every ``period_env_steps`` a trial in the worst ``fraction`` of those that reached the same
    step takes a better trial's training state and perturbs ``ranges``' hyperparameters."""

    period_env_steps: int = 50_000
    fraction: float = 0.25
    perturb_factor: float = 1.2
    mutation_rate: float = 1.0
    ranges: dict[str, tuple[float, float]] = field(default_factory=lambda: {"learning_rate": (1e-5, 1e-2)})


@dataclass(frozen=True)
class SweepSpec:
    """See the module docstring. ``trials``: configurations drawn by random and Optuna searches (a grid runs all of
    its own); ``concurrent``: trials at once (0: as many as the cluster's free workers hold)."""

    name: str
    base: dict[str, Any]
    space: dict[str, Domain]
    search: str = "grid"
    trials: int = 8
    seeds: tuple[int, ...] = (0,)
    budget_env_steps: int = 1_000_000
    early_stopping: str = "none"
    rungs: int = 3
    reduction: int = 3
    concurrent: int = 0
    search_seed: int = 0
    pbt: PBTSpec | None = None
    tasks: tuple[Task, ...] = ()

    def trial_config(self, params: dict[str, Any], seed: int, sweep_dir: str, trial_id: str,
                     task: str = "") -> Config:
        """The config of one trial: the base, the configuration's values, its env (with tasks), its seed and
        budget, its directory."""
        env = {"env": task} if task else {}
        return Config.from_flat({**self.base, **params, **env, "seed": seed,
                                 "train_for_env_steps": self.budget_env_steps, "train_dir": sweep_dir,
                                 "experiment": trial_id})

    def task_envs(self) -> tuple[str, ...]:
        """The env each configuration runs on: its tasks' ("" for the base's env when the spec has no tasks)."""
        return tuple(t.env for t in self.tasks) or ("",)

    def score(self, task: str, episode_return: float) -> float:
        """What a trial's return counts for: its task's normalized score, or the return itself without tasks."""
        for t in self.tasks:
            if t.env == task:
                return t.score(episode_return)
        return episode_return

    def rung_steps(self) -> list[int]:
        """The env steps at which ASHA decides (the last, the full budget, is not a decision)."""
        if self.early_stopping == "none":
            return []
        return [int(self.budget_env_steps / self.reduction ** k) for k in range(self.rungs - 1, 0, -1)]

    def to_json(self) -> str:
        data = asdict(self)
        data["space"] = {k: _domain_json(d) for k, d in self.space.items()}
        data["tasks"] = tasks_json(self.tasks)
        return json.dumps(data, indent=2, default=list)


def _domain_json(d: Domain) -> Any:
    if d.values:
        return list(d.values)
    return {"low": d.low, "high": d.high, "log": d.log, "type": "int" if d.integer else "float"}


def load_spec(path: str) -> SweepSpec:
    """A spec from a YAML or JSON file (a sweep directory's ``sweep.json`` too)."""
    return spec_from_dict(read_spec_data(path))


def read_spec_data(path: str) -> dict[str, Any]:
    """A spec file's data, unchecked (the command line's flags go over it before :func:`spec_from_dict`)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError([f"sweep spec {path!r}: {exc.strerror or exc}"]) from exc
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml  # dask's own dependency

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # a parse error: its message says the line
        raise ConfigError([f"sweep spec {path!r} does not parse: {exc}"]) from exc
    if not isinstance(data, dict):
        raise ConfigError([f"sweep spec {path!r} must be a mapping of keys (name, base, space, ...)"])
    data.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return data


_KEYS = {"name", "base", "space", "search", "trials", "seeds", "budget_env_steps", "early_stopping", "rungs",
         "reduction", "concurrent", "search_seed", "pbt", "tasks"}


def spec_from_dict(data: dict[str, Any]) -> SweepSpec:
    """A checked :class:`SweepSpec` from plain data, or :class:`ConfigError` with every problem."""
    problems = [f"unknown sweep key {k!r} (keys: {', '.join(sorted(_KEYS))})" for k in data if k not in _KEYS]
    base = dict(data.get("base") or {})
    space: dict[str, Domain] = {}
    for name, raw in (data.get("space") or {}).items():
        try:
            space[name] = parse_domain(name, raw)
        except ValueError as exc:
            problems.append(str(exc))
    seeds = data.get("seeds", 1)
    seeds = tuple(range(int(seeds))) if isinstance(seeds, int) else tuple(int(s) for s in seeds)
    pbt = _pbt_spec(data.get("pbt"), problems)
    tasks = parse_tasks(data.get("tasks"), problems)
    kwargs = {k: data[k] for k in ("search", "trials", "budget_env_steps", "early_stopping", "rungs", "reduction",
                                   "concurrent", "search_seed") if k in data}
    spec = SweepSpec(name=str(data.get("name") or "sweep"), base=base, space=space, seeds=seeds, pbt=pbt,
                     tasks=tasks, **kwargs)
    problems += spec_problems(spec)
    if problems:
        raise ConfigError(problems)
    return spec


def parse_domain(name: str, raw: Any) -> Domain:
    """``[v1, v2]``, ``{"values": [...]}`` or ``{"low": a, "high": b, "log": bool, "type": "int"|"float"}``."""
    if isinstance(raw, dict) and "values" in raw:
        raw = raw["values"]
    if isinstance(raw, (list, tuple)):
        if not raw:
            raise ValueError(f"space option {name!r} has an empty list of values")
        return Domain(values=tuple(raw))
    if isinstance(raw, dict) and {"low", "high"} <= set(raw):
        low, high = float(raw["low"]), float(raw["high"])
        log, integer = bool(raw.get("log", False)), raw.get("type", "float") == "int"
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ValueError(f"space option {name!r} has an empty range [{low:g}, {high:g}] (low must be below high)")
        if log and low <= 0:
            raise ValueError(f"space option {name!r}: a log range needs low > 0, got {low:g}")
        return Domain(low=low, high=high, log=log, integer=integer)
    raise ValueError(f"space option {name!r} must be a list of values or {{low, high[, log][, type]}}, got {raw!r}")


def _pbt_spec(raw: Any, problems: list[str]) -> PBTSpec | None:
    if not raw:
        return None
    raw = dict(raw)
    ranges = raw.pop("ranges", None) or {"learning_rate": (1e-5, 1e-2)}
    bad = [k for k in ranges if k not in MUTABLE]
    if bad:
        problems.append(f"pbt ranges name {', '.join(map(repr, bad))}: PBT moves only {', '.join(MUTABLE)}")
    unknown = [k for k in raw if k not in ("period_env_steps", "fraction", "perturb_factor", "mutation_rate")]
    if unknown:
        problems.append(f"unknown pbt key(s) {', '.join(map(repr, unknown))}")
        return None
    spec = PBTSpec(ranges={k: (float(v[0]), float(v[1])) for k, v in ranges.items() if k in MUTABLE}, **raw)
    if not 0 < spec.fraction <= 0.5:
        problems.append(f"pbt fraction must be in (0, 0.5], got {spec.fraction}")
    if spec.period_env_steps <= 0 or spec.perturb_factor <= 1:
        problems.append("pbt period_env_steps must be > 0 and perturb_factor > 1")
    return spec


def spec_problems(spec: SweepSpec) -> list[str]:
    """Every problem of a spec, one line each (the option values checked by a real Config)."""
    problems = []
    if spec.search not in SEARCHES:
        problems.append(f"search must be one of {', '.join(SEARCHES)}, got {spec.search!r}")
    if spec.early_stopping not in EARLY_STOPPING:
        problems.append(f"early_stopping must be one of {', '.join(EARLY_STOPPING)}, got {spec.early_stopping!r}")
    if spec.early_stopping == "median" and spec.search in ("grid", "random"):
        problems.append("early_stopping 'median' is Optuna's pruner: use it with search tpe or cmaes (or use asha)")
    if spec.search == "grid":
        problems += [f"grid search needs a list of values for {k!r}, not a range" for k, d in spec.space.items()
                     if d.is_range]
    if spec.budget_env_steps <= 0 or spec.trials <= 0 or not spec.seeds or spec.rungs < 1 or spec.reduction < 2:
        problems.append("budget_env_steps and trials must be > 0, seeds at least one, rungs >= 1, reduction >= 2")
    problems += [f"the sweep sets {k!r} for each trial itself: leave it out of base and space"
                 for k in {*spec.base, *spec.space} if k in SWEEP_OWNED]
    if spec.tasks and "env" in {*spec.base, *spec.space}:
        problems.append("tasks set each trial's env: leave env out of base and space")
    if spec.tasks and spec.pbt:
        problems.append("PBT across trials copies one trial's weights into another: it needs trials of one env, "
                        "not tasks")
    problems += _option_problems(spec)
    return problems


def _option_problems(spec: SweepSpec) -> list[str]:
    """Build the base and every candidate value into a Config: unknown names and refused values, one line each."""
    problems = []
    for task in spec.tasks[1:]:  # the first is the base the values below are checked on
        try:
            Config.from_flat({**spec.base, "env": task.env}).validate()
        except ConfigError as exc:
            problems += [f"task {task.env!r}: {p}" for p in exc.problems]
    try:
        base = Config.from_flat({**spec.base, "env": spec.tasks[0].env} if spec.tasks else spec.base).validate()
    except ConfigError as exc:
        return problems + [f"base: {p}" for p in exc.problems]
    for name, domain in spec.space.items():
        for value in domain.candidates():
            try:
                base.replace(**{name: value}).validate()
            except ConfigError as exc:
                problems += [f"space {name}={value!r}: {p}" for p in exc.problems]
                break
    return problems
