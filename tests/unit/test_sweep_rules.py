"""A sweep's rules without a cluster: the spec's checks, the flags, the searches, ASHA's decisions, PBT's choices
and the statistics across seeds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from daskrl.cli import build_parser
from daskrl.errors import ConfigError
from daskrl.sweep.asha import ASHA
from daskrl.sweep.command import spec_from_args
from daskrl.sweep.exploit import TrialPBT
from daskrl.sweep.results import (
    bootstrap_ci,
    curve_band,
    iqm,
    performance_profile,
    probability_of_improvement,
    rank,
    stratified_bootstrap_ci,
)
from daskrl.sweep.search import GridSearch, RandomSearch
from daskrl.sweep.spec import PBTSpec, spec_from_dict
from daskrl.sweep.trials import Trial

GOOD = {"name": "s", "base": {"env": "CartPole-v1"}, "space": {"learning_rate": [1e-4, 3e-4],
                                                                 "num_epochs": [1, 2]}}


def test_a_good_spec_reads_and_its_trials_get_their_own_options():
    spec = spec_from_dict({**GOOD, "seeds": 2, "budget_env_steps": 1000, "early_stopping": "asha"})
    assert spec.seeds == (0, 1)
    config = spec.trial_config({"learning_rate": 1e-4}, 1, "train_dir", "s/c000-s1")
    assert (config.learner.learning_rate, config.run.seed, config.run.train_for_env_steps) == (1e-4, 1, 1000)
    assert config.experiment_dir == "train_dir/s/c000-s1"
    assert spec.rung_steps() == [111, 333]  # 1000 / 3^2, 1000 / 3; the budget itself is no decision


def test_every_problem_of_a_spec_is_one_line_and_all_come_at_once():
    with pytest.raises(ConfigError) as err:
        spec_from_dict({"name": "s", "base": {"env": "CartPole-v1", "seed": 3},
                        "space": {"learning_rat": [1e-3], "gamma": {"low": 0.99, "high": 0.9},
                                  "num_epochs": [0, 1], "clip_ratio": {"low": 0.1, "high": 0.3}},
                        "search": "grid", "bogus": 1})
    problems = err.value.problems
    text = "\n".join(problems)
    assert "unknown sweep key 'bogus'" in text
    assert "'learning_rat' (did you mean 'learning_rate'?)" in text
    assert "empty range [0.99, 0.9]" in text
    assert "num_epochs=0" in text  # a value the option refuses, found by building it into a Config
    assert "grid search needs a list of values for 'clip_ratio'" in text
    assert "sets 'seed' for each trial itself" in text
    assert all("\n" not in p for p in problems)


def test_flags_build_the_same_spec_a_file_does(tmp_path):
    args = build_parser().parse_args([
        "sweep", "--env", "CartPole-v1", "--set", "num_workers=1", "--param", "learning_rate=1e-4,3e-4",
        "--param", "gamma=0.9:0.999:log", "--param", "num_epochs=1:4:int", "--search", "random", "--trials", "3",
        "--seeds", "2", "--budget-env-steps", "5000", "--name", "flags"])
    spec = spec_from_args(args)
    assert spec.base == {"env": "CartPole-v1", "num_workers": 1}
    assert spec.space["learning_rate"].values == (1e-4, 3e-4)
    assert (spec.space["gamma"].low, spec.space["gamma"].log) == (0.9, True)
    assert spec.space["num_epochs"].integer and spec.trials == 3 and spec.seeds == (0, 1)
    with pytest.raises(ConfigError, match="at least one option to search"):
        spec_from_args(build_parser().parse_args(["sweep", "--env", "CartPole-v1"]))
    tasks = spec_from_args(build_parser().parse_args([
        "sweep", "--param", "learning_rate=1e-4,3e-4", "--task", "HalfCheetah-v5=5819:-280",
        "--task", "Swimmer-v5=281.6"])).tasks
    assert [(t.env, t.reference, t.random) for t in tasks] == [("HalfCheetah-v5", 5819.0, -280.0),
                                                                ("Swimmer-v5", 281.6, 0.0)]


def test_grid_runs_every_point_and_random_draws_the_same_configuration_again():
    spec = spec_from_dict(GOOD)
    grid = GridSearch(spec)
    points = [grid.ask(i) for i in range(5)]
    assert points[4] is None and len({tuple(p.items()) for p in points[:4]}) == 4
    spec = spec_from_dict({**GOOD, "search": "random", "trials": 5,
                           "space": {"learning_rate": {"low": 1e-5, "high": 1e-2, "log": True},
                                     "num_epochs": {"low": 1, "high": 8, "type": "int"}}})
    first, again = RandomSearch(spec), RandomSearch(spec)
    draws = [first.ask(i) for i in range(5)]
    assert draws == [again.ask(i) for i in range(5)] and first.ask(5) is None
    assert all(1e-5 <= d["learning_rate"] <= 1e-2 and isinstance(d["num_epochs"], int) for d in draws)
    assert len({d["learning_rate"] for d in draws}) == 5


def test_asha_lets_the_first_go_on_and_stops_what_is_below_the_best_third():
    asha = ASHA([100, 300], reduction=3)
    assert asha.decide(0, 100, 10.0)  # alone at the rung
    assert not asha.decide(1, 100, 5.0)  # below the cutoff of [10]
    assert asha.decide(2, 100, 20.0)
    assert not asha.decide(3, 100, 12.0)  # [10, 5, 20]: the cutoff is the 2/3 quantile, 13.3
    assert not asha.decide(4, 100, math.nan)  # no episode yet ranks last
    assert asha.decide(5, 300, math.nan)  # a rung of its own: first there


def test_pbt_across_trials_copies_a_better_trial_and_moves_only_declared_values_within_range(tmp_path):
    pbt = TrialPBT(PBTSpec(period_env_steps=100, fraction=0.5, perturb_factor=2.0,
                           ranges={"learning_rate": (1e-4, 1e-3)}), str(tmp_path), seed=0)
    trials = [Trial(i, 0, {}) for i in range(4)]
    for t, r in zip(trials, (10.0, 50.0, 30.0, math.nan), strict=True):
        t.final_return = r
    assert pbt.choose(trials[1], trials) is None  # the best copies nobody
    assert pbt.choose(trials[0], trials) is trials[1] or pbt.choose(trials[0], trials) in trials[1:3]
    assert pbt.choose(trials[3], trials) is None  # no episode yet: not ranked
    values = [pbt.explore({"learning_rate": 8e-4, "gamma": 0.99})["learning_rate"] for _ in range(50)]
    assert set(values) <= {1e-3, 4e-4} and len(set(values)) == 2  # x2 clipped to the range, or /2
    assert not pbt.due(trials[0])  # first seen at 0 env steps: the first round is at 100
    trials[0].env_steps = 150
    assert pbt.due(trials[0]) and not pbt.due(trials[0])  # once per period passed


def test_iqm_and_its_interval_across_seeds():
    assert iqm(np.array([1.0, 2.0, 3.0, 100.0])) == 2.5  # a quarter cut from each end
    assert iqm(np.array([4.0, 6.0])) == 5.0
    low, high = bootstrap_ci(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]))
    assert low < iqm(np.arange(1.0, 9.0)) < high
    x = np.array([0.0, 100.0, 200.0])
    grid, mean, lo, hi = curve_band([(x, np.array([0.0, 10.0, 20.0])), (x, np.array([0.0, 30.0, 40.0]))], points=3)
    assert np.allclose(mean, [0.0, 20.0, 30.0]) and np.all(lo <= mean) and np.all(mean <= hi)
    assert hi[1] - lo[1] > 0  # two seeds that differ: a band, not a line


#: a fixed table of normalized scores: 3 tasks x 5 seeds, one task much harder than the others
SCORES = np.array([[0.95, 1.02, 0.88, 1.10, 0.97], [0.61, 0.75, 0.58, 0.70, 0.66], [0.05, 0.12, 0.02, 0.30, 0.08]])


def rliable_stratified_iqm_ci(scores: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """rliable's published recipe, written here from its definitions (Agarwal et al. 2021, appendix A.4): per
    resample, draw each task's runs with replacement on their own, take scipy's trim_mean(x, 0.25) over all of them;
    the interval is the 2.5th and 97.5th percentiles. All resamples are drawn at once (one row each), and trim_mean
    takes them row by row."""
    from scipy.stats import trim_mean

    rng = np.random.RandomState(seed)
    draws = np.concatenate([row[rng.randint(0, len(row), (resamples, len(row)))] for row in scores], axis=1)
    stats = trim_mean(draws, 0.25, axis=1)
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def test_the_stratified_interval_matches_rliables_recipe_and_keeps_every_task_in_every_resample():
    ours = stratified_bootstrap_ci(list(SCORES))
    theirs = rliable_stratified_iqm_ci(SCORES, 20_000, seed=1)
    assert np.allclose(ours, theirs, atol=0.01), (ours, theirs)
    pooled = bootstrap_ci(SCORES.ravel())  # a plain bootstrap may draw no run of the hard task: a wider interval
    assert pooled[1] - pooled[0] > ours[1] - ours[0]


def test_the_performance_profile_and_the_probability_of_improvement_follow_their_definitions():
    from scipy.stats import mannwhitneyu

    assert np.allclose(performance_profile(SCORES, np.array([0.0, 0.5, 1.0, 2.0])), [1.0, 10 / 15, 2 / 15, 0.0])
    better = SCORES + np.array([[0.05], [0.0], [-0.02]])
    expected = np.mean([mannwhitneyu(x, y).statistic / (len(x) * len(y))
                        for x, y in zip(better, SCORES, strict=True)])
    assert probability_of_improvement(list(better), list(SCORES)) == pytest.approx(expected)
    assert probability_of_improvement(list(SCORES), list(SCORES)) == 0.5  # ties count half


def test_ranking_puts_full_runs_by_iqm_first_and_stopped_ones_after():
    def row(config, seed, status, final):
        return {"configuration": config, "seed": seed, "status": status, "final_return": final, "final_score": final,
                "params": {}, "env_steps": 100, "task": ""}
    rows = [row(0, 0, "finished", 100.0), row(0, 1, "finished", 90.0), row(1, 0, "finished", 200.0),
            row(1, 1, "finished", 180.0), row(2, 0, "stopped", 500.0), row(2, 1, "stopped", 400.0),
            row(3, 0, "failed", math.nan)]
    ranked = rank(rows)
    assert [r.configuration for r in ranked] == [1, 0, 2, 3]
    assert ranked[0].mean == ranked[0].iqm == 190.0  # the IQM of two seeds is their mean


def test_tasks_put_each_envs_returns_on_one_scale_and_rank_configurations_by_their_mean_score():
    spec = spec_from_dict({"name": "family", "base": {"num_workers": 1}, "space": {"learning_rate": [1e-4, 3e-4]},
                           "tasks": {"CartPole-v1": 500, "Acrobot-v1": {"reference": -100, "random": -500}}})
    assert spec.task_envs() == ("CartPole-v1", "Acrobot-v1")
    assert spec.score("CartPole-v1", 250.0) == 0.5 and spec.score("Acrobot-v1", -100.0) == 1.0
    assert spec.score("Acrobot-v1", -300.0) == 0.5 and math.isnan(spec.score("Acrobot-v1", math.nan))
    config = spec.trial_config({}, 0, "train_dir", "family/c000-Acrobot-v1-s0", "Acrobot-v1")
    assert config.env.env == "Acrobot-v1"
    assert Trial(3, 1, {}, task="mpe2.simple_v3:parallel_env").trial_id == "c003-mpe2.simple_v3_parallel_env-s1"
    assert spec_from_dict(json.loads(spec.to_json())).tasks == spec.tasks  # sweep.json reads back (--resume)

    def row(config, task, final):
        return {"configuration": config, "seed": 0, "status": "finished", "final_return": final, "params": {},
                "final_score": spec.score(task, final), "env_steps": 100, "task": task}
    # configuration 0 has the higher returns summed, configuration 1 the higher scores: scores decide
    rows = [row(0, "CartPole-v1", 500.0), row(0, "Acrobot-v1", -500.0),
            row(1, "CartPole-v1", 400.0), row(1, "Acrobot-v1", -200.0)]
    assert [r.configuration for r in rank(rows)] == [1, 0] and rank(rows)[0].mean == pytest.approx(0.775)


def test_a_bad_task_list_is_refused_one_line_each():
    with pytest.raises(ConfigError) as refused:
        spec_from_dict({"name": "s", "base": {"env": "CartPole-v1"}, "space": {"learning_rate": [1e-4]},
                        "tasks": {"CartPole-v1": 500, "Acrobot-v1": {"reference": -500, "random": -500},
                                  "Pendulum-v1": {"best": 0}},
                        "pbt": {"period_env_steps": 1000}})
    text = "\n".join(refused.value.problems)
    assert "task 'Acrobot-v1': the reference return (-500) must be finite and differ" in text
    assert "task 'Pendulum-v1': give {reference: R}" in text
    assert "tasks set each trial's env: leave env out of base and space" in text
    assert "PBT across trials copies one trial's weights into another" in text
    with pytest.raises(ConfigError, match="tasks must map each env id"):
        spec_from_dict({**GOOD, "base": {}, "tasks": ["CartPole-v1"]})


def test_the_dashboard_keeps_each_sweeps_newest_table_and_lists_it():
    from daskrl.monitor.dashboard.runs import sweeps_table_html
    from daskrl.monitor.history import MetricsStore, sweeps_payload

    store = MetricsStore()
    assert not store.add_sweep({"sweep": "x"}) and sweeps_table_html(store.sweeps) == ""
    trials = [Trial(0, 0, {}), Trial(1, 0, {})]
    trials[0].status = "finished"
    store.add_sweep({"sweep": "lr", "time": 1.0, "best": None, "trials": [t.row() for t in trials]})
    store.add_sweep({"sweep": "lr", "time": 2.0, "best": 412.5, "trials": [t.row() for t in trials]})
    page = sweeps_table_html(store.sweeps)
    assert "<td style='padding-right:1em'>lr</td>" in page and "1 finished, 1 queued" in page and "412.5" in page
    assert [s["best"] for s in sweeps_payload(store)["sweeps"]] == [412.5]


def test_the_result_lines_give_returns_or_scores(capsys):
    from daskrl.sweep.command import print_result

    best = {"configuration": 2, "params": {"gamma": 0.98}, "mean_return": 0.5204, "iqm": 0.5751, "ci": (-0.014, 0.943)}
    print_result({"rows": [{"status": "finished"}, {"status": "stopped"}], "ended": "SIGINT", "sweep_dir": "d",
                  "measure": "score", "best": best})
    out = capsys.readouterr().out
    assert "2 trials (1 finished, 1 stopped)" in out and "continue with: daskrl sweep --resume d" in out
    assert "best configuration c002 (gamma=0.98): mean score 0.52, IQM 0.575 [-0.014, 0.943]" in out
    print_result({"rows": [], "ended": "done", "sweep_dir": "d", "measure": "return",
                  "best": {**best, "mean_return": 412.46, "iqm": 420.0, "ci": (400.0, 433.3)}})
    assert "mean return 412.5, IQM 420.0 [400.0, 433.3]" in capsys.readouterr().out
