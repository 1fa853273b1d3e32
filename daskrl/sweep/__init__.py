"""Sweeps: many trials of one search (grid, random, Optuna) with several seeds each, packed onto one Dask cluster,
with early stopping (ASHA, Optuna's median pruner) and PBT across trials; results across seeds with confidence
intervals (:mod:`.results`, ``daskrl report --sweep``).

``daskrl.sweep.run_sweep(spec)`` (``daskrl sweep SPEC`` on the command line) writes ``<train_dir>/<name>/``: the
spec as ``sweep.json``, one experiment per trial (``c<configuration>-s<seed>``), ``sweep.csv`` and, with PBT,
``pbt.csv``. ``resume=True`` continues the trials that did not end and runs none that did.
"""

from __future__ import annotations

import os
from typing import Any

from daskrl.driver.fleet.placement import workers_needed
from daskrl.errors import ConfigError
from daskrl.sweep.spec import SweepSpec, load_spec, spec_from_dict
from daskrl.sweep.trials import INTERRUPTED, RUNNING, read_table, read_trials


def run_sweep(spec: SweepSpec | dict[str, Any] | str | None = None, train_dir: str = "train_dir", client: Any = None,
              scheduler: str = "", resume: str = "", say: Any = print) -> dict[str, Any]:
    """Run a sweep (``spec``: a :class:`SweepSpec`, its dict, or a spec file) or, with ``resume`` (a sweep
    directory), continue one. ``client`` / ``scheduler``: the cluster (default: an embedded one sized for the
    trials). Returns where it stands: its directory, why it ended, the best configuration (its ``mean_return`` is
    a mean score with tasks: ``measure`` says which) and every trial's row."""
    from daskrl.sweep.cluster import SweepCluster, embedded_workers
    from daskrl.sweep.driver import SweepDriver
    from daskrl.sweep.results import best

    spec, sweep_dir, trials = _open(spec, train_dir, resume)
    need = max(workers_needed(spec.trial_config(trials[0].params if trials else {}, 0, train_dir, "probe", task))
               for task in spec.task_envs())
    cluster = SweepCluster(client, scheduler, n_workers=embedded_workers(spec.concurrent, need))
    try:
        driver = SweepDriver(spec, sweep_dir, trials, cluster, need, say=say)
        tasks = f" on {len(spec.tasks)} tasks ({', '.join(spec.task_envs())})" if spec.tasks else ""
        say(f"daskrl sweep: {spec.name}: {spec.search} search, {len(spec.seeds)} seed(s) per configuration{tasks}, "
            f"{spec.budget_env_steps:,} env steps per trial, up to {driver.concurrent} at once, in {sweep_dir}")
        ended = driver.run()
    finally:
        cluster.close()
    rows = read_table(sweep_dir)
    chosen = best(rows)
    return {"sweep_dir": sweep_dir, "ended": ended, "rows": rows, "measure": "score" if spec.tasks else "return",
            "best": None if chosen is None else {"configuration": chosen.configuration, "params": chosen.params,
                                                 "mean_return": chosen.mean, "iqm": chosen.iqm, "ci": chosen.ci}}


def _open(spec: Any, train_dir: str, resume: str) -> tuple[SweepSpec, str, list]:
    """The spec, the sweep directory and the trials so far (none for a new sweep, whose directory must be new)."""
    if resume:
        resume = os.path.normpath(resume)
        path = os.path.join(resume, "sweep.json")
        if not os.path.exists(path):
            raise ConfigError([f"{resume!r} is not a sweep directory (no sweep.json): check --resume"])
        trials = read_trials(resume)
        for trial in trials:
            if trial.status == RUNNING:  # its driver stopped without a word (killed): it did not end
                trial.status = INTERRUPTED
        return load_spec(path), resume, trials
    if isinstance(spec, str):
        spec = load_spec(spec)
    elif isinstance(spec, dict):
        spec = spec_from_dict(spec)
    if not isinstance(spec, SweepSpec):
        raise ConfigError(["a sweep needs a spec (a file, a dict or a SweepSpec), or resume=<sweep directory>"])
    sweep_dir = os.path.join(train_dir, spec.name)
    if os.path.exists(os.path.join(sweep_dir, "sweep.json")):
        raise ConfigError([f"sweep {sweep_dir!r} exists: continue it with --resume {sweep_dir}, or give this one "
                           "another name"])
    os.makedirs(sweep_dir, exist_ok=True)
    with open(os.path.join(sweep_dir, "sweep.json"), "w") as f:
        f.write(spec.to_json())
    return spec, sweep_dir, []


__all__ = ["SweepSpec", "load_spec", "run_sweep", "spec_from_dict"]
